/** The bus envelope (broker/bus/envelope.ts) and what a verified one may carry (broker/bus/payload-schemas.ts). */
import { describe, expect, it } from 'vitest';
import { ENVELOPE_MAX_AGE_MS, open, seal } from '../../broker/bus/envelope.js';
import { checkPayload } from '../../broker/bus/payload-schemas.js';

const KEY = 'k'.repeat(32);
const OTHER = 'o'.repeat(32);
const CHANNEL = 'mesh:bus:mesh:4b0e7f0e-0000-4000-8000-000000000001';
const message = {
  from: 'node-a',
  kind: 'member.revoked',
  payload: { memberId: 7, nested: { b: [1, 2.5, 'x'] } },
  stamp: { boot: '0123456789abcdef', n: 42 },
};

describe('seal / open', () => {
  it('opens what it sealed, with the current key or the previous one', () => {
    const text = seal({ current: KEY }, CHANNEL, message);
    expect(open({ current: KEY }, CHANNEL, text)).toEqual({ ok: true, envelope: message });
    expect(open({ current: OTHER, previous: KEY }, CHANNEL, text)).toEqual({ ok: true, envelope: message });
    expect(JSON.parse(text)).toMatchObject({
      v: 2,
      from: 'node-a',
      boot: '0123456789abcdef',
      n: 42,
      kind: 'member.revoked',
      ts: expect.any(Number),
    });
  });

  it('refuses another key, another channel, and any field changed after sealing', () => {
    const text = seal({ current: KEY }, CHANNEL, message);
    expect(open({ current: OTHER }, CHANNEL, text)).toEqual({ ok: false, reason: 'bad_mac' });
    expect(open({ current: KEY }, `${CHANNEL}2`, text)).toEqual({ ok: false, reason: 'bad_mac' });
    const fields = JSON.parse(text);
    for (const changed of [
      { ...fields, from: 'node-b' },
      { ...fields, kind: 'presence.kick' },
      { ...fields, payload: { memberId: 8, nested: fields.payload.nested } },
      { ...fields, ts: fields.ts + 1 },
      { ...fields, boot: 'fedcba9876543210' },
      { ...fields, n: fields.n + 1 },
      { ...fields, n: 0 },
      { ...fields, n: '42' },
      { ...fields, boot: undefined },
      // Its last two characters replaced by two others (a fixed 'AA' was no change for one mac in 4,096).
      { ...fields, mac: `${fields.mac.slice(0, -2)}${fields.mac.endsWith('AA') ? 'BB' : 'AA'}` },
      { ...fields, mac: '' },
    ])
      expect(open({ current: KEY }, CHANNEL, JSON.stringify(changed))).toEqual({
        ok: false,
        reason: 'bad_mac',
      });
  });

  it('names why: unsigned, unknown version, stale, bad JSON', () => {
    const text = seal({ current: KEY }, CHANNEL, message);
    const { v: _v, mac: _mac, ...unsigned } = JSON.parse(text);
    expect(open({ current: KEY }, CHANNEL, JSON.stringify(unsigned))).toEqual({
      ok: false,
      reason: 'unsigned',
    });
    expect(open({ current: KEY }, CHANNEL, JSON.stringify({ ...JSON.parse(text), mac: undefined }))).toEqual({
      ok: false,
      reason: 'unsigned',
    });
    expect(open({ current: KEY }, CHANNEL, JSON.stringify({ ...JSON.parse(text), v: 1 }))).toEqual({
      ok: false,
      reason: 'unknown_version',
    });
    const now = Date.now();
    const old = seal({ current: KEY }, CHANNEL, message, now - ENVELOPE_MAX_AGE_MS - 1);
    expect(open({ current: KEY }, CHANNEL, old, now)).toEqual({ ok: false, reason: 'stale' });
    expect(open({ current: KEY }, CHANNEL, old, now - 2)).toMatchObject({ ok: true });
    for (const bad of ['{', '[]', 'null', '"text"', '42'])
      expect(open({ current: KEY }, CHANNEL, bad)).toEqual({ ok: false, reason: 'bad_json' });
  });
});

describe('checkPayload', () => {
  const kick = { sessionId: '4b0e7f0e-0000-4000-8000-000000000002' };
  it('takes each kind only on its channel type', () => {
    expect(checkPayload('node', 'presence.kick', kick)).toMatchObject({ ok: true, kind: 'presence.kick' });
    expect(checkPayload('mesh', 'presence.kick', kick)).toEqual({ ok: false, reason: 'kind_not_allowed' });
    expect(checkPayload('node', 'member.revoked', { memberId: 1 })).toEqual({
      ok: false,
      reason: 'kind_not_allowed',
    });
    expect(checkPayload('mesh', 'toString', {})).toEqual({ ok: false, reason: 'kind_not_allowed' });
  });

  it("refuses a payload of another kind's shape, or with a field more", () => {
    const message = { type: 'message', messageId: '1', sentAt: 'now', from: 'a'.repeat(64), body: 'x' };
    expect(checkPayload('mesh', 'presence.event', message)).toEqual({ ok: false, reason: 'bad_payload' });
    expect(checkPayload('mesh', 'member.revoked', { memberId: 1, extra: true })).toEqual({
      ok: false,
      reason: 'bad_payload',
    });
    expect(checkPayload('mesh', 'member.revoked', { memberId: -1 })).toEqual({
      ok: false,
      reason: 'bad_payload',
    });
    const left = { type: 'peer.left', pubkey: 'a'.repeat(64), sessionId: kick.sessionId };
    expect(checkPayload('mesh', 'presence.event', left)).toEqual({
      ok: true,
      kind: 'presence.event',
      payload: left,
    });
  });
});
