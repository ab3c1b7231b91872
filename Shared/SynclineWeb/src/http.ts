import { retryAfterSeconds } from "./backoff.js";
import type { SignIn } from "./signin.js";
import type { Problem } from "./views.js";

/** A failure worth retrying after a pause (network, 429, 5xx, auth); `after`: the server's `Retry-After`, in seconds. */
export class Retry extends Error {
  constructor(message: string, readonly after?: number) {
    super(message);
  }
}

/**
 * A server's answer, its body read: JSON when it is (`unknown` until its status says which
 * of the answers in views.ts it is), the problem when it is one, and the problem's `detail`
 * (else the text's start).
 */
export interface Answer {
  status: number;
  json: unknown;
  problem: Problem;
  detail: string;
  retryAfter?: number;
  headers: Headers;
}

/** `?space_id=…` (or with `&`, or another parameter `name`) for an id given; nothing without one (the personal space). */
export function spaceParameter(spaceID: string | undefined, separator: "?" | "&" = "?", name = "space_id"): string {
  return spaceID ? `${separator}${name}=${encodeURIComponent(spaceID)}` : "";
}

/** The gateway, reached with the app's bearer token. */
export class Gateway {
  constructor(readonly url: string, readonly signIn: SignIn) {}

  /**
   * A request with the bearer token (asked again once after a 401); a JSON body unless
   * `Content-Type` says otherwise. A 401 to the fresh token tells the sign-in it was refused.
   */
  async fetch(method: string, path: string, body?: string | Blob, headers: Record<string, string> = {}): Promise<Response> {
    for (let refresh = false; ; refresh = true) {
      const token = await this.signIn.token(refresh);
      let response: Response;
      try {
        response = await fetch(this.url + path, {
          method, body, headers: { ...(typeof body === "string" ? { "Content-Type": "application/json" } : {}), ...headers, Authorization: `Bearer ${token}` },
        });
      } catch (error) {
        throw new Retry(`cannot reach the server: ${error instanceof Error ? error.message : String(error)}`);
      }
      if (response.status !== 401) {
        this.signIn.accepted();
        return response;
      }
      if (refresh) {
        this.signIn.refusedBy((await response.clone().json().catch(() => ({}))) as Problem);
        return response;
      }
    }
  }

  async send(method: string, path: string, body?: string | Blob, headers: Record<string, string> = {}): Promise<Answer> {
    const response = await this.fetch(method, path, body, headers);
    const text = await response.text();
    let json: unknown = null;
    try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    const problem: Problem = response.ok || typeof json !== "object" || json === null ? {} : json;
    return {
      status: response.status, json, problem, detail: typeof problem.detail === "string" ? problem.detail : text.slice(0, 500),
      retryAfter: retryAfterSeconds(response.headers.get("Retry-After")), headers: response.headers,
    };
  }

  /** The answer of status `expected`, read as `View`; any other status throws with the server's detail. */
  async call<View = void>(method: string, path: string, expected: number, body?: unknown): Promise<View> {
    const answer = await this.send(method, path, body === undefined ? undefined : JSON.stringify(body));
    if (answer.status !== expected) throw new Error(`server answered ${answer.status}: ${answer.detail}`);
    return answer.json as View;
  }
}
