/**
 * Row "reads and home region" (flag `ha.regions`, docs/multi-region.md): the read pool for the lag-tolerant
 * list reads, and which nodes try a mesh's clock, schedule firing and watch polling. Built first: the rows
 * that list or claim take its view (broker/modules.ts).
 */
import { defineRow, type RowParts } from '../rows/row.js';
import type { Regions } from './regions.js';
import { LocalRegions } from './regions.local.js';
import { SharedRegions } from './regions.shared.js';

/** How often a node re-reads which home regions are alive (a handover back to the home region takes this long). */
const HOME_VIEW_REFRESH_MS = 1000;

export const regionsRow = defineRow({
  name: 'regions',
  flag: 'ha.regions',
  metric: 'mesh_broker_region_reads_total',
  doc: 'docs/multi-region.md',
  uses: ['config', 'pool', 'readPool', 'log', 'metrics'],
  build: ({ config, pool, readPool, log, metrics }): RowParts<Regions> => {
    const readLabel = readPool === pool ? 'primary' : 'replica';
    return {
      local: new LocalRegions(pool, () => metrics.regionReads.inc({ pool: 'primary' })),
      shared: new SharedRegions({
        primary: pool,
        reads: readPool,
        counted: () => metrics.regionReads.inc({ pool: readLabel }),
        region: config.region,
        primaryRegion: config.primaryRegion,
        nodeDeadMs: config.nodeDeadMs,
        refreshMs: Math.min(HOME_VIEW_REFRESH_MS, config.heartbeatMs),
        log,
      }),
    };
  },
});
