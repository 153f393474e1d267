import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
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
    // unleash-client 6.12.1 sometimes ends a failed poll of an unreachable server (refused port, a server
    // the test stopped) as an unhandled rejection instead of an error event. The broker reports such a
    // server in /flags (flags/provider.unleash.ts); this ignores exactly that rejection and nothing else.
    // A real node's policy for unexpected rejections is issue 17's crash policy.
    onUnhandledError: (error) =>
      !(
        (error as { name?: string }).name === 'FetchError' &&
        /\/api\/client\/features failed, reason: connect ECONNREFUSED/.test(String((error as Error).message))
      ),
  },
});
