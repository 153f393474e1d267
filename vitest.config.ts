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
  },
});
