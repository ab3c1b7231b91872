// This device's sign-in as the server sees it: the app's token, asked for only when there
// is none or it is about to expire, and whether the server takes it.

/** Whether the server takes this device's token: unknown until it answers, refused after a 401 that a fresh token did not fix. */
export type AuthState = "unknown" | "accepted" | "refused";

/** Why the server refused the token (its problem's `token` member): none was sent, it expired, or it is not one the server accepts. */
export type TokenRefusal = "missing" | "expired" | "invalid";

/** How long before its expiry a token is asked for anew (s). */
const renewBefore = 30;

/** A JWT's `exp` in milliseconds, or null when the token is not a JWT with one (an opaque token is kept until a 401). */
export function tokenExpiry(token: string): number | null {
  const payload = token.split(".")[1];
  if (token.split(".").length !== 3 || !payload) return null;
  try {
    const json = JSON.parse(atob(payload.replace(/-/g, "+").replace(/_/g, "/"))) as { exp?: unknown };
    return typeof json.exp === "number" && Number.isFinite(json.exp) ? json.exp * 1000 : null;
  } catch {
    return null;
  }
}

export class SignIn {
  state: AuthState = "unknown";
  #token: { value: string; expiresAt: number | null } | null = null;
  #asking: { refresh: boolean; token: Promise<string> } | null = null;

  /** `refused`: called when the server refuses the token after a fresh one was tried, once until it takes one again. */
  constructor(readonly provider: (refresh: boolean) => Promise<string>, readonly refused: (reason: TokenRefusal, detail: string) => void) {}

  /**
   * The token to send: the one kept, until `renewBefore` seconds before its expiry (a
   * JWT's `exp`), else the app's provider's; `refresh` (after a 401) always asks it.
   * Callers at the same time share one ask.
   */
  token(refresh: boolean, now = Date.now()): Promise<string> {
    const kept = this.#token;
    if (!refresh && kept && (kept.expiresAt === null || kept.expiresAt - renewBefore * 1000 > now)) return Promise.resolve(kept.value);
    if (this.#asking && (this.#asking.refresh || !refresh)) return this.#asking.token;
    const asking = { refresh, token: this.provider(refresh) };
    this.#asking = asking;
    asking.token.then((value) => {
      if (this.#asking === asking) this.#token = { value, expiresAt: tokenExpiry(value) };
    }, () => {}).finally(() => {
      if (this.#asking === asking) this.#asking = null;
    });
    return asking.token;
  }

  /** The server answered a request with something other than 401. */
  accepted(): void {
    this.state = "accepted";
  }

  /** The server answered 401 to a fresh token: the app should sign the user in again. */
  refusedBy(problem: { token?: unknown; detail?: unknown }): void {
    this.#token = null;
    const first = this.state !== "refused";
    this.state = "refused";
    const reason: TokenRefusal = problem.token === "missing" || problem.token === "expired" ? problem.token : "invalid";
    if (first) this.refused(reason, typeof problem.detail === "string" ? problem.detail : "the server refused the token");
  }

  /** Another tab's requests found the token refused. */
  heardRefused(): void {
    this.#token = null;
    this.state = "refused";
  }

  /** Forgets the token kept (signing out). */
  forget(): void {
    this.#token = null;
    this.#asking = null;
    this.state = "unknown";
  }
}
