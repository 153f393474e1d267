/**
 * Member keys as the SDK makes them (client/keys.ts): a random 32-byte ed25519 seed, its public key derived
 * from it, no key-generation job (see generateMemberKeys for the Node 20 deadlock that avoids). A hello
 * signed with them is one the broker's check accepts; another member's public key is refused.
 */
import { describe, expect, it } from 'vitest';
import { helloSignatureValid } from '../../broker/hello/signature.js';
import { generateMemberKeys, pubkeyOf, signHello } from '../../client/keys.js';
import type { HelloFrame } from '../../protocol/requests.js';

describe('generateMemberKeys', () => {
  it('makes a 32-byte seed and its public key, each in lowercase hex, different every time', () => {
    const keys = Array.from({ length: 200 }, generateMemberKeys);
    for (const { pubkey, secretKey } of keys) {
      expect(secretKey).toMatch(/^[0-9a-f]{64}$/);
      expect(pubkey).toMatch(/^[0-9a-f]{64}$/);
      expect(pubkeyOf(secretKey)).toBe(pubkey);
    }
    expect(new Set(keys.map((k) => k.secretKey)).size).toBe(200);
    expect(new Set(keys.map((k) => k.pubkey)).size).toBe(200);
  });

  it("signs hellos the broker accepts, and that fail under another member's public key", () => {
    const keys = generateMemberKeys();
    const other = generateMemberKeys();
    const hello = {
      type: 'hello',
      ...signHello(keys, crypto.randomUUID(), crypto.randomUUID()),
    } as HelloFrame;
    expect(helloSignatureValid(hello)).toBe(true);
    expect(helloSignatureValid({ ...hello, pubkey: other.pubkey })).toBe(false);
  });
});
