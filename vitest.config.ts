import { defaultServerConditions } from 'vite';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Tests import @mesh-broker/sdk (client/) by name and get its TypeScript sources through this export
 * condition (client/package.json § exports), as tsconfig.json's customConditions does for the type check:
 * `npx vitest run` needs no build of the SDK first and never runs a stale one. Processes the tests start
 * (the compiled `workbench`, the examples) are plain Node and load the package's dist/ build.
 */
const SDK_SOURCE = '@mesh-broker/source';
// Tests run in vite's server (ssr) environment, whose conditions these are.

export default defineConfig({
  ssr: { resolve: { conditions: [SDK_SOURCE, ...defaultServerConditions] } },
  test: {
    include: ['tests/**/*.test.ts'],
    // Under a real container engine, minutes long and root only: `npm run test:containers`.
    exclude: [...configDefaults.exclude, 'tests/containers/**'],
    // Each file gets its own database and Redis prefix, so files run in parallel safely.
    pool: 'forks',
    fileParallelism: true,
    maxWorkers: 3,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
