import { createPublicKey, verify } from 'node:crypto';
import { helloSigningString } from '../../protocol/hello-message.js';
import type { HelloFrame } from '../../protocol/requests.js';

/** Verifies the ed25519 signature of a hello against the raw public key it names. */
export function helloSignatureValid(hello: HelloFrame): boolean {
  try {
    const key = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(hello.pubkey, 'hex').toString('base64url') },
      format: 'jwk',
    });
    return verify(null, Buffer.from(helloSigningString(hello), 'utf8'), key, Buffer.from(hello.sig, 'hex'));
  } catch {
    return false; // not a point on the curve, or otherwise unusable as a key
  }
}
