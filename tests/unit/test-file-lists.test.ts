/**
 * The lists that steer the runs (tests/slow-files.ts: which files `npm test` leaves to `npm run test:slow`;
 * tests/heaviest-first.ts: which files start first) name files that exist, once each, so a rename cannot
 * silently move a two-minute file back into `npm test` or to the end of the queue.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { HEAVIEST_FILES } from '../heaviest-first.js';
import { SLOW_TEST_FILES } from '../slow-files.js';

describe('the test-file lists', () => {
  it.each([
    ['slow-files', SLOW_TEST_FILES],
    ['heaviest-first', HEAVIEST_FILES],
  ])('%s names existing test files, each once', (_name, files) => {
    expect(files.filter((file) => !existsSync(join(packageRoot(), file)))).toEqual([]);
    expect(new Set(files).size).toBe(files.length);
    expect(files.every((file) => file.endsWith('.test.ts'))).toBe(true);
  });

  it('no file is both slow (left out of npm test) and among the first of npm test', () => {
    expect(HEAVIEST_FILES.filter((file) => SLOW_TEST_FILES.includes(file))).toEqual([]);
  });
});
