/**
 * Replay protection for hello nonces: a nonce is accepted at most once within the window in which its
 * hello's timestamp is acceptable (twice the allowed skew), after which the timestamp check refuses it.
 */
export interface NonceGuard {
  /** True the first time `nonce` is seen within the window; false for every later attempt. */
  claim(nonce: string): Promise<boolean>;
  close(): Promise<void>;
}
