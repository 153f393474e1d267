/**
 * The SDK's one reconnect policy (client/retry.ts): full-jitter backoff within its bounds, the older
 * `backoff` spelling still read, and bad options refused at construction with a message naming them.
 */
import { generateMemberKeys, MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import { backoffDelay, resolveRetry } from '../../client/retry.js';

describe('the retry policy', () => {
  it('waits uniformly in [0, min(max, initial × 2^n)]', () => {
    const policy = resolveRetry({ initialDelayMs: 100, maxDelayMs: 1000 }, undefined);
    expect([0, 1, 2, 3, 4, 10, 100].map((n) => backoffDelay(policy, n, () => 1))).toEqual([
      100, 200, 400, 800, 1000, 1000, 1000,
    ]);
    expect(backoffDelay(policy, 3, () => 0)).toBe(0);
    expect(backoffDelay(policy, 3, () => 0.5)).toBe(400);
  });

  it('has defaults of 100 ms, 5 s and no cap, and reads the older backoff option', () => {
    expect(resolveRetry(undefined, undefined)).toEqual({
      initialDelayMs: 100,
      maxDelayMs: 5000,
      maxAttempts: Number.POSITIVE_INFINITY,
    });
    expect(resolveRetry(undefined, { initialMs: 20, maxMs: 50 })).toMatchObject({
      initialDelayMs: 20,
      maxDelayMs: 50,
    });
    expect(resolveRetry({ maxDelayMs: 70 }, { initialMs: 20, maxMs: 50 })).toMatchObject({
      initialDelayMs: 20,
      maxDelayMs: 70,
    });
  });

  it.each([
    [{ initialDelayMs: -1 }, 'retry.initialDelayMs must be a number ≥ 0, got -1'],
    [{ maxDelayMs: Number.NaN }, 'retry.maxDelayMs must be a number ≥ 0, got NaN'],
    [{ maxAttempts: 0 }, 'retry.maxAttempts must be at least 1'],
  ])('refuses %j at construction', (retry, message) => {
    const make = () =>
      new MeshClient({ urls: ['ws://127.0.0.1:1/ws'], meshId: 'm', keys: generateMemberKeys(), retry });
    expect(make).toThrow(message);
  });
});
