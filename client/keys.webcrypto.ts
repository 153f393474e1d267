/**
 * Signing a hello with WebCrypto instead of node:crypto: the SDK's keys module for a browser (the
 * console's peer page maps `keys.js` to this file with an import map, so `client.js` runs unchanged).
 * Same wire forms as `keys.ts` (hex pubkey, hex 32-byte seed) and the same signing string; ed25519 is
 * deterministic, so both give the same signature for the same fields. Asynchronous, because WebCrypto is.
 * Uses only `globalThis.crypto`, so it also runs (and is tested) in Node.
 */
// A type only (erased from the JavaScript): the page never imports node:crypto.
import type { webcrypto } from 'node:crypto';
import { helloSigningString } from '../protocol/hello-message.js';
import type { HelloFields } from './keys.js';

/** PKCS#8 DER header of an ed25519 private key; the 32-byte seed follows it (as in keys.ts). */
const PKCS8_ED25519_PREFIX = '302e020100300506032b657004220420';

const toHex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');

function fromHex(hex: string): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

/** Imported keys by seed: a reconnect signs a new hello without importing the key again. */
const imported = new Map<string, Promise<webcrypto.CryptoKey>>();

function privateKey(secretKey: string): Promise<webcrypto.CryptoKey> {
  if (!/^[0-9a-f]{64}$/.test(secretKey)) throw new Error('secretKey must be 32 bytes of lowercase hex');
  let key = imported.get(secretKey);
  if (!key) {
    key = globalThis.crypto.subtle.importKey(
      'pkcs8',
      fromHex(PKCS8_ED25519_PREFIX + secretKey),
      { name: 'Ed25519' },
      false,
      ['sign'],
    );
    imported.set(secretKey, key);
  }
  return key;
}

/** A signed hello's identity fields, with a fresh nonce and the current time unless given. */
export async function signHello(
  keys: { secretKey: string; pubkey: string },
  meshId: string,
  sessionId: string,
  at: { ts?: number; nonce?: string } = {},
): Promise<HelloFields> {
  const ts = at.ts ?? Date.now();
  const nonce = at.nonce ?? toHex(globalThis.crypto.getRandomValues(new Uint8Array(16)));
  const unsigned = { meshId, pubkey: keys.pubkey, sessionId, ts, nonce };
  const sig = await globalThis.crypto.subtle.sign(
    { name: 'Ed25519' },
    await privateKey(keys.secretKey),
    new TextEncoder().encode(helloSigningString(unsigned)),
  );
  return { ...unsigned, sig: toHex(new Uint8Array(sig)) };
}
