/**
 * A flag flip from the console: exactly what `workbench flags set KEY on|off` does for the local cluster
 * (file provider): the file written under the flag's lock with its audit event (recordFlagChange, once),
 * then "refresh now" pushed to the nodes over Redis (their Redis Cluster's sharded channel when they run on
 * one). The request is checked first: a bad one changes nothing.
 */
import type { Pool } from '../../broker/db/pool.js';
import { flagChangeLedger } from '../../broker/flag-changes.js';
import { refreshPublisher } from '../../broker/flag-refresh.js';
import type { RedisClient } from '../../broker/redis/clients.js';
import type { FlagsAccess } from '../../flags/access.js';
import { changeFlag } from '../../flags/changes.js';
import { publishRefresh } from '../../flags/refresh-bus.js';
import { FLAG_KEYS, type FlagKey, isFlagKey } from '../../flags/registry.js';

export interface FlipRequest {
  flag: FlagKey;
  value: boolean;
}

/** A request the console refuses (HTTP 400), with a message for the person who clicked. */
export class BadFlipRequest extends Error {}

/** `{"flag": "ha.clock", "value": true}`; anything else is refused with the reason. */
export function parseFlipRequest(body: string): FlipRequest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new BadFlipRequest('the body must be JSON: {"flag": "<key>", "value": true|false}');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new BadFlipRequest('the body must be a JSON object: {"flag": "<key>", "value": true|false}');
  const { flag, value, ...extra } = parsed as Record<string, unknown>;
  const unexpected = Object.keys(extra);
  if (unexpected.length > 0) throw new BadFlipRequest(`unexpected field "${unexpected[0]}"`);
  if (typeof flag !== 'string' || !isFlagKey(flag))
    throw new BadFlipRequest(`unknown flag ${JSON.stringify(flag)}; known flags: ${FLAG_KEYS.join(', ')}`);
  if (typeof value !== 'boolean')
    throw new BadFlipRequest(`"value" must be true or false, got ${JSON.stringify(value) ?? 'nothing'}`);
  return { flag, value };
}

export interface FlipOutcome {
  flag: FlagKey;
  value: boolean;
  /** The file's value before the flip. */
  previous: boolean;
  /** An audit event was written (once per change: not when the flag already had the value). */
  audited: boolean;
  /** Nodes subscribed to the push; undefined when Redis did not answer (the nodes' poll catches up). */
  pushedTo?: number;
}

export async function flipFlag(
  deps: { pool: Pool; redis: RedisClient; redisKeyPrefix: string; flags: FlagsAccess; environment: string },
  request: FlipRequest,
  actor: string,
): Promise<FlipOutcome> {
  const { flag, value } = request;
  const { changed, from: previous } = await changeFlag(flagChangeLedger(deps.pool), deps.flags, {
    environment: deps.environment,
    flag,
    value,
    actor,
  });
  let pushedTo: number | undefined;
  try {
    pushedTo = await publishRefresh(refreshPublisher(deps.redis), deps.redisKeyPrefix, deps.environment, {
      flag,
      value,
    });
  } catch {
    // the nodes' own poll of the file is the backstop
  }
  return { flag, value, previous, audited: changed, pushedTo };
}
