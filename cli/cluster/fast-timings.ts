/**
 * Broker timings that make cluster behaviour observable in seconds, not minutes: the cluster tests and
 * `workbench chaos` both run with them, so a chaos run recovers from each fault within its spacing.
 */
export const FAST_CLUSTER = {
  HEARTBEAT_MS: '500',
  PRESENCE_GRACE_MS: '1000',
  NODE_DEAD_MS: '1500',
  DELIVERY_CHECK_MS: '500',
  FLAGS_POLL_MS: '500',
};
