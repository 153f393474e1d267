/** Row "send / hook rate limits" (flag `ha.rate-limits`, docs/rate-limits.md). */
import { defineRow, type RowParts } from '../rows/row.js';
import { type RateLimits, ratePolicies } from './rate-limits.js';
import { LocalRateLimits } from './rate-limits.local.js';
import { SharedRateLimits } from './rate-limits.shared.js';
import { rateLimitsShadow } from './shadow.js';

export const rateLimitsRow = defineRow({
  name: 'rate-limits',
  flag: 'ha.rate-limits',
  metric: 'mesh_broker_rate_limited_total',
  doc: 'docs/rate-limits.md',
  uses: ['config', 'log', 'metrics', 'redis', 'redisGuard'],
  build: ({ config, log, metrics, redis, redisGuard }): RowParts<RateLimits> => {
    const policies = ratePolicies(config);
    const local = new LocalRateLimits(policies);
    const onFallback = () => metrics.redisFallbacks.inc({ row: 'rate-limits' });
    return {
      local,
      shared: new SharedRateLimits(redis, redisGuard, policies, local, onFallback, log),
      shadow: () => rateLimitsShadow(redis, policies, log),
    };
  },
});
