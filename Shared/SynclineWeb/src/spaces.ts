// Managing spaces: calls that need the server, so this module is loaded on their first use.
import { Gateway } from "./http.js";
import type { SignIn } from "./signin.js";
import type { InvitationView, ItemsPage, JoinedView, MemberView, SpaceView } from "./views.js";

export type Role = "owner" | "editor" | "viewer";

/** A space the user belongs to. */
export interface Space {
  spaceID: string;
  name: string;
  role: Role;
  personal: boolean;
}

export interface Invitation {
  invitationID: string;
  code: string;
  role: Role;
  expiresAt: string;
}

export interface Member {
  userID: string;
  role: Role;
  joinedAt: string;
}

const path = (spaceID: string, rest = "") => `/v1/spaces/${encodeURIComponent(spaceID)}${rest}`;

const space = (view: SpaceView): Space => ({ spaceID: view.space_id, name: view.name, role: view.role, personal: view.personal });

/** The server's space routes, as `SyncClient` offers them. */
export class Spaces {
  readonly gateway: Gateway;

  constructor(gatewayURL: string, signIn: SignIn) {
    this.gateway = new Gateway(gatewayURL, signIn);
  }

  async list(): Promise<Space[]> {
    return (await this.gateway.call<ItemsPage<SpaceView>>("GET", "/v1/spaces", 200)).items.map(space);
  }

  async create(name: string): Promise<Space> {
    return space(await this.gateway.call<SpaceView>("POST", "/v1/spaces", 201, { name }));
  }

  async invite(spaceID: string, role: Role, expiresIn?: number): Promise<Invitation> {
    const view = await this.gateway.call<InvitationView>("POST", path(spaceID, "/invitations"), 201, expiresIn === undefined ? { role } : { role, expires_in: expiresIn });
    return { invitationID: view.invitation_id, code: view.code, role: view.role, expiresAt: view.expires_at };
  }

  async accept(code: string): Promise<{ spaceID: string; role: Role }> {
    const joined = await this.gateway.call<JoinedView>("POST", `/v1/invitations/${encodeURIComponent(code)}/accept`, 200);
    return { spaceID: joined.space_id, role: joined.role };
  }

  async members(spaceID: string): Promise<Member[]> {
    return (await this.gateway.call<ItemsPage<MemberView>>("GET", path(spaceID, "/members"), 200)).items
      .map((member) => ({ userID: member.user_id, role: member.role, joinedAt: member.joined_at }));
  }

  async setRole(role: Role, userID: string, spaceID: string): Promise<void> {
    await this.gateway.call("PATCH", path(spaceID, `/members/${encodeURIComponent(userID)}`), 200, { role });
  }

  async removeMember(userID: string, spaceID: string): Promise<void> {
    await this.gateway.call("DELETE", path(spaceID, `/members/${encodeURIComponent(userID)}`), 204);
  }

  async delete(spaceID: string): Promise<void> {
    await this.gateway.call("DELETE", path(spaceID), 204);
  }
}
