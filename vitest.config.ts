import { defaultServerConditions } from 'vite';
import { configDefaults, defineConfig } from 'vitest/config';
import HeaviestFirst from './tests/heaviest-first.js';
import { TEST_BUS_SECRET } from './tests/helpers/bus-secret.js';
import { SLOW_TEST_FILES } from './tests/slow-files.js';

/**
 * Tests import @mesh-broker/sdk (client/) by name and get its TypeScript sources through this export
 * condition (client/package.json § exports), as tsconfig.json's customConditions does for the type check:
 * `npx vitest run` needs no build of the SDK first and never runs a stale one. Processes the tests start
 * (the compiled `workbench`, the examples) are plain Node and load the package's dist/ build.
 */
const SDK_SOURCE = '@mesh-broker/source';
// Tests run in vite's server (ssr) environment, whose conditions these are.

/** Under a real container engine, minutes long and root only: `npm run test:containers`. */
const CONTAINER_TESTS = 'tests/containers/**';

/**
 * Two projects, so the README's `npm test` stays under ten minutes while every test still runs in CI:
 * `fast` (`npm test`) is every file but the slow ones, `slow` (`npm run test:slow`, which .ci/run runs
 * after `npm test`) is the files listed in tests/slow-files.ts, each with the reason it needs minutes.
 * `npx vitest run FILE` still runs any one file, whichever project holds it.
 */
export default defineConfig({
  ssr: { resolve: { conditions: [SDK_SOURCE, ...defaultServerConditions] } },
  test: {
    // Each file gets its own database and Redis prefix, so files run in parallel safely.
    pool: 'forks',
    fileParallelism: true,
    // More workers than the machine's two cores: most of a cluster test's time is spent waiting on its
    // nodes' timers (leases, heartbeats, grace periods), not on the CPU.
    maxWorkers: 3,
    // The longest files first, so no worker is left with a two-minute file at the end (tests/heaviest-first.ts).
    sequence: { sequencer: HeaviestFirst },
    testTimeout: 30_000,
    // Every process a test spawns (a `workbench broker`, `workbench up`'s brokers get their own) inherits
    // the cluster's bus secret, as a node's environment gives it in production.
    env: { BUS_SECRET: TEST_BUS_SECRET },
    hookTimeout: 60_000,
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'fast',
          include: ['tests/**/*.test.ts'],
          exclude: [...configDefaults.exclude, CONTAINER_TESTS, ...SLOW_TEST_FILES],
        },
      },
      {
        extends: true,
        test: {
          name: 'slow',
          include: [...SLOW_TEST_FILES],
          exclude: [...configDefaults.exclude, CONTAINER_TESTS],
        },
      },
    ],
  },
});
