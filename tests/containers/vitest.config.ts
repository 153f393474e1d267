import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * `npm run test:containers`: the tests under a real container engine (tests/containers), apart from
 * `npm test` (they need root, Debian's docker.io and debootstrap, and minutes of building). One file at a
 * time: they share the checkout's daemon.
 */
export default defineConfig({
  root: fileURLToPath(new URL('../..', import.meta.url)),
  test: {
    include: ['tests/containers/**/*.test.ts'],
    pool: 'forks',
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 120_000,
    hookTimeout: 30 * 60_000,
    reporters: ['default'],
  },
});
