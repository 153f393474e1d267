/** The throw-away redis-server lives with `workbench chaos`, which restarts and stalls one too: one implementation. */
export { ThrowawayRedis } from '../../cli/chaos/services.js';
