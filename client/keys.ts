/**
 * Member keys: ed25519 through node:crypto. On the wire a public key is its raw 32 bytes in lowercase
 * hex, and a secret key is the 32-byte seed in hex (the form `workbench mesh create` writes).
 */
import { createPrivateKey, createPublicKey, type KeyObject, randomBytes, sign } from 'node:crypto';
import { helloSigningString } from '../protocol/hello-message.js';

export interface MemberKeys {
  pubkey: string;
  secretKey: string;
}

/** PKCS#8 DER header of an ed25519 private key; the 32-byte seed follows it. */
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

/**
 * A new member's keys. An ed25519 secret key is any 32 random bytes (the seed), so it is drawn directly
 * rather than through `generateKeyPairSync`: on Node 20 a key-generation job collected by the garbage
 * collector while a key it made is being exported (`export({ format: 'jwk' })`) deadlocks the process
 * (seen once: `workbench promote` hung for good inside its smoke checks, its main thread waiting on the
 * key's mutex in KeyGenJob's destructor under ExportJWK). No job, no deadlock.
 */
export function generateMemberKeys(): MemberKeys {
  const secretKey = randomBytes(32).toString('hex');
  return { pubkey: pubkeyOf(secretKey), secretKey };
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
