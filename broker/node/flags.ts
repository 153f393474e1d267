/**
 * The node's flag runtime: it hands each snapshot to the row reconciler, beats the heartbeat at once on a
 * change (so `workbench flags list` sees it), and records hand edits of the flags file.
 */
import { recordFlagChange } from '../../flags/changes.js';
import { subscribeRefresh } from '../../flags/refresh-bus.js';
import type { BrokerConfig } from '../config.js';
import type { Pool } from '../db/pool.js';
import { flagChangeLedger } from '../flag-changes.js';
import { createFlagProvider } from '../flag-provider.js';
import { FlagRuntime } from '../flag-runtime.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { PubSub } from '../redis/pubsub.js';
import type { RowReconciler } from '../rows/reconciler.js';

export interface NodeFlagsOptions {
  config: BrokerConfig;
  pool: Pool;
  log: Logger;
  metrics: BrokerMetrics;
  reconciler: RowReconciler;
  /** Told of every change (the heartbeat, which may not exist yet). */
  changed: () => void;
}

export function createNodeFlags(options: NodeFlagsOptions): FlagRuntime {
  const { config, pool, log } = options;
  return new FlagRuntime({
    environment: config.flagsEnv,
    provider: createFlagProvider(config),
    reconciler: options.reconciler,
    metrics: options.metrics,
    log,
    onChange: (changed, snapshot, initial) => {
      options.changed();
      // A hand edit of the file has no author: the first node to see it change records it (once,
      // cluster-wide). What a node reads when it starts is not a change (it may be a stray copy).
      if (snapshot.source !== 'file' || initial) return;
      for (const { flag, value } of changed) {
        recordFlagChange(flagChangeLedger(pool), {
          environment: config.flagsEnv,
          flag,
          value,
          actor: `node:${config.nodeId}`,
          // A change of a boolean: it was the other value (what this node acted on until now).
          previous: !value,
        }).catch((error) => log.warn({ err: error, flag }, 'could not record a flag change'));
      }
    },
  });
}

/**
 * "Refresh now" pushes of `workbench flags set`: a connection of its own (subscriber mode), queueing the
 * subscribe until it is connected. Without it the provider's poll still applies changes.
 */
export async function subscribeFlagPushes(
  pubsub: PubSub,
  config: BrokerConfig,
  flags: FlagRuntime,
  log: Logger,
) {
  await subscribeRefresh(pubsub, config.redisKeyPrefix, config.flagsEnv, () => flags.refresh()).catch(
    (error) => log.warn({ err: error }, 'flags: no push subscription (the poll still applies changes)'),
  );
}
