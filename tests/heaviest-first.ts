/**
 * The order in which vitest starts the test files (vitest.config.ts `sequence.sequencer`): the files known
 * to take longest first, then the rest as vitest orders them. Three workers share the files; a file of two
 * minutes started late is a tail in which the other workers sit idle (seen on fresh clones, which have no
 * vitest cache of durations to order by: `npm test` took 11 minutes where its files need under 5 of each
 * worker). Figures: one `fast` run on 2026-12-02, seconds per file on the loaded two cores.
 */
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const HEAVIEST_FILES: string[] = [
  'tests/cluster/regions.test.ts', // 128 s: two regions with a real streaming replica, cut and healed
  'tests/contract/watches.test.ts', // 85 s
  'tests/cluster/prometheus-environments.test.ts', // 80 s, mostly idle: two `for: 1m` alerts waited for
  'tests/process/sdk-tarball.test.ts', // 50–85 s: packs a clean copy, npm install of the tarball, Chromium
  'tests/contract/presence.test.ts', // 60 s
  'tests/cluster/lb.test.ts', // 40 s
  'tests/cluster/rolling-restart.test.ts', // 55 s: rolls of a phase-3 cluster under 200 sessions
  'tests/cluster/streams-node-kill.test.ts', // 41 s (loaded run): 1000 subscriptions across a SIGKILL
  'tests/process/audit-checkpoint.test.ts', // 36 s
  'tests/contract/schedules.test.ts', // 30 s
  'tests/cluster/promote-safety.test.ts', // 11 s idle, 25–47 s loaded: two-node clusters, promote refused each way
  'tests/cluster/console.test.ts', // 27 s
  'tests/integration/abuse-schedules-watches.test.ts', // 23 s
  'tests/integration/abuse-mcp.test.ts', // 20 s
  'tests/cluster/ha-schedules.test.ts', // 20 s
  'tests/contract/streams.test.ts', // 19 s
  'tests/process/audit-verifier.test.ts', // 19 s
  'tests/process/startup.test.ts', // 16 s
];

export default class HeaviestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (file: TestSpecification) => {
      const index = HEAVIEST_FILES.findIndex((heavy) => file.moduleId.endsWith(`/${heavy}`));
      return index === -1 ? HEAVIEST_FILES.length : index;
    };
    // Array.prototype.sort is stable: the rest keep vitest's own order.
    return sorted.sort((x, y) => rank(x) - rank(y));
  }
}
