/**
 * The exact UTF-8 string a hello signs (docs/protocol.md § Identity and hello). Shared by the broker, which
 * verifies it, and the peer SDK, which signs it; pure so that browser builds of the SDK can use it.
 */
export function helloSigningString(h: {
  meshId: string;
  pubkey: string;
  sessionId: string;
  ts: number;
  nonce: string;
}): string {
  return `mesh-hello|v1|${h.meshId}|${h.pubkey}|${h.sessionId}|${h.ts}|${h.nonce}`;
}
