import { describe, expect, it } from 'vitest';
import { BadFlipRequest, parseFlipRequest } from '../../cli/console/flag-flip.js';
import { RateTracker, sumCounters } from '../../cli/console/rates.js';
import { generateMemberKeys, signHello } from '../../client/keys.js';
import { signHello as signHelloWebCrypto } from '../../client/keys.webcrypto.js';

const METRICS = `# HELP mesh_broker_deliveries_total Deliveries
# TYPE mesh_broker_deliveries_total counter
mesh_broker_deliveries_total{node="b1",path="local"} 3
mesh_broker_deliveries_total{node="b1",path="remote"} 4
mesh_broker_messages_accepted_total{node="b1"} 10
mesh_broker_messages_accepted_total_other{node="b1"} 99
mesh_broker_stream_publishes_total{node="b1",note="a } b"} 2
`;

describe('console: message rates from /metrics', () => {
  it('sums every series of a family, and nothing of a family that only starts with its name', () => {
    const sums = sumCounters(METRICS, [
      'mesh_broker_deliveries_total',
      'mesh_broker_messages_accepted_total',
      'mesh_broker_stream_publishes_total',
      'mesh_broker_absent_total',
    ]);
    expect(Object.fromEntries(sums)).toEqual({
      mesh_broker_deliveries_total: 7,
      mesh_broker_messages_accepted_total: 10,
      mesh_broker_stream_publishes_total: 2,
      mesh_broker_absent_total: 0,
    });
  });

  it('a rate is the increase between two scrapes per second; a counter that went down restarted', () => {
    const tracker = new RateTracker();
    expect(tracker.observe('b1', METRICS, 1000)).toBeUndefined();
    const later = METRICS.replace('} 10', '} 30');
    expect(tracker.observe('b1', later, 3000)).toEqual({ accepted: 10, delivered: 0, streamPublishes: 0 });
    const restarted = later.replace('} 30', '} 4');
    expect(tracker.observe('b1', restarted, 4000)?.accepted).toBe(4);
    tracker.forget('b1');
    expect(tracker.observe('b1', restarted, 5000)).toBeUndefined();
  });
});

describe('console: the flag flip request', () => {
  it('accepts a known flag and a boolean', () => {
    expect(parseFlipRequest('{"flag":"ha.clock","value":false}')).toEqual({ flag: 'ha.clock', value: false });
  });

  it.each([
    ['not json', 'the body must be JSON'],
    ['[1]', 'must be a JSON object'],
    ['{"flag":"ha.clok","value":true}', 'unknown flag "ha.clok"; known flags: ha.presence'],
    ['{"flag":"ha.clock","value":"on"}', '"value" must be true or false, got "on"'],
    ['{"flag":"ha.clock"}', '"value" must be true or false, got nothing'],
    ['{"flag":"ha.clock","value":true,"env":"prod"}', 'unexpected field "env"'],
  ])('refuses %s', (body, message) => {
    expect(() => parseFlipRequest(body)).toThrow(BadFlipRequest);
    expect(() => parseFlipRequest(body)).toThrow(message);
  });
});

describe('the SDK keys module for browsers (WebCrypto)', () => {
  it('signs a hello exactly as the node:crypto module does (ed25519 is deterministic)', async () => {
    const keys = generateMemberKeys();
    const at = { ts: 1_700_000_000_000, nonce: '00112233445566778899aabbccddeeff' };
    const meshId = '11111111-2222-3333-4444-555555555555';
    expect(await signHelloWebCrypto(keys, meshId, 'session-1', at)).toEqual(
      signHello(keys, meshId, 'session-1', at),
    );
    const fresh = await signHelloWebCrypto(keys, meshId, 'session-1');
    expect(fresh.nonce).toMatch(/^[0-9a-f]{32}$/);
    await expect(signHelloWebCrypto({ ...keys, secretKey: 'xyz' }, meshId, 's')).rejects.toThrow(
      'secretKey must be 32 bytes',
    );
  });
});
