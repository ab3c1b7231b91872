// The app's rules as a device holds them: the document last fetched (`GET /v1/rules`, kept
// in the database with its ETag, so they hold offline) and the device's role in its space.
import type { ClientRules, RuleRefusal } from "./rules.js";
import type { Op } from "./op.js";
import type { Role } from "./spaces.js";

/** What the database keeps of the rules (meta `rules`). */
export interface StoredRules {
  document: unknown;
  etag: string | null;
}

export class HeldRules {
  constructor(readonly rules: ClientRules | null, readonly role: Role | null) {}

  /**
   * The rules kept in `store`, and the role in the space (the personal space's owner when
   * none is named). Their checks are loaded only when the device holds rules: a page of an
   * app without rules never loads them.
   */
  static async read(store: { meta<T>(key: string): Promise<T | undefined> }, spaceID: string | undefined): Promise<HeldRules> {
    const stored = await store.meta<StoredRules>("rules");
    const role = spaceID === undefined ? "owner" : (await store.meta<Role>("role")) ?? null;
    const rules = stored ? (await import("./rules.js")).ClientRules.compile(stored.document) : null;
    return new HeldRules(rules, role);
  }

  get version(): number {
    return this.rules?.version ?? 0;
  }

  screen(op: Op): RuleRefusal | null {
    return this.rules?.screen(op, this.role) ?? null;
  }
}

/** A set-aside reason naming the rule that refused an op: `rule:recipes.schema`. */
export function ruleReason(rule: string): string {
  return `rule:${rule}`;
}
