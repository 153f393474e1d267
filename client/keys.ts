/**
 * Member keys: ed25519 through node:crypto. On the wire a public key is its raw 32 bytes in lowercase
 * hex, and a secret key is the 32-byte seed in hex (the form `workbench mesh create` writes).
 */
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  sign,
} from 'node:crypto';
import { helloSigningString } from '../protocol/hello-message.js';

export interface MemberKeys {
  pubkey: string;
  secretKey: string;
}

/** PKCS#8 DER header of an ed25519 private key; the 32-byte seed follows it. */
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

export function generateMemberKeys(): MemberKeys {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const jwk = privateKey.export({ format: 'jwk' });
  return {
    pubkey: Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url').toString('hex'),
    secretKey: Buffer.from(jwk.d!, 'base64url').toString('hex'),
  };
}

export function privateKeyFromSeed(secretKey: string): KeyObject {
  if (!/^[0-9a-f]{64}$/.test(secretKey)) throw new Error('secretKey must be 32 bytes of lowercase hex');
  return createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519_PREFIX, Buffer.from(secretKey, 'hex')]),
    format: 'der',
    type: 'pkcs8',
  });
}

export function pubkeyOf(secretKey: string): string {
  const jwk = createPublicKey(privateKeyFromSeed(secretKey)).export({ format: 'jwk' });
  return Buffer.from(jwk.x!, 'base64url').toString('hex');
}

export interface HelloFields {
  meshId: string;
  pubkey: string;
  sessionId: string;
  ts: number;
  nonce: string;
  sig: string;
}

/** A signed hello's identity fields, with a fresh nonce and the current time unless given. */
export function signHello(
  keys: { secretKey: string; pubkey: string },
  meshId: string,
  sessionId: string,
  at: { ts?: number; nonce?: string } = {},
): HelloFields {
  const ts = at.ts ?? Date.now();
  const nonce = at.nonce ?? randomBytes(16).toString('hex');
  const unsigned = { meshId, pubkey: keys.pubkey, sessionId, ts, nonce };
  const sig = sign(
    null,
    Buffer.from(helloSigningString(unsigned), 'utf8'),
    privateKeyFromSeed(keys.secretKey),
  );
  return { ...unsigned, sig: sig.toString('hex') };
}
