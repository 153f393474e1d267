/**
 * cli/cluster/exit-cleanup.ts in a real process (the compiled module, dist/: run "npm run build" first):
 * cleanups run on a normal exit and on a signal nobody else handles (and the process still dies by it),
 * not on a signal the program handles itself, and not once unregistered.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { captured } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

const MODULE = join(packageRoot(), 'dist', 'cli', 'cluster', 'exit-cleanup.js');
const dir = mkdtempSync(join(tmpdir(), 'wb-exit-cleanup-'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `body` in a child with `onExit` imported and `mark(name)` registering a cleanup that writes dir/name. */
function child(body: string) {
  if (!existsSync(MODULE)) throw new Error(`${MODULE} is missing: run "npm run build" first`);
  const script = `
    const { onExit } = await import(${JSON.stringify(MODULE)});
    const { appendFileSync } = await import('node:fs');
    const mark = (name) => onExit(() => appendFileSync(${JSON.stringify(dir)} + '/' + name, 'ran\\n'));
    ${body}
    console.log('ready');
  `;
  const started = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const { output, exited } = captured(started);
  const ready = waitFor(() => output().includes('ready'), { timeoutMs: 10_000, what: 'the child ready' });
  return { process: started, output, exited, ready };
}

const ran = (name: string) => (existsSync(join(dir, name)) ? readFileSync(join(dir, name), 'utf8') : '');

describe('exit cleanup', () => {
  it('runs on a normal exit, once, and not once unregistered', async () => {
    const c = child(`mark('normal'); const off = mark('unregistered'); off();`);
    expect(await c.exited).toBe(0);
    expect(ran('normal')).toBe('ran\n');
    expect(ran('unregistered')).toBe('');
  });

  it('runs on a SIGINT nobody handles, and the process still dies by SIGINT', async () => {
    const c = child(`mark('sigint'); setInterval(() => {}, 1000);`);
    await c.ready;
    c.process.kill('SIGINT');
    expect(await c.exited).toBe('SIGINT');
    expect(ran('sigint')).toBe('ran\n');
  });

  it('leaves a signal the program handles to the program: nothing runs until it exits', async () => {
    const c = child(`
      mark('handled');
      process.on('SIGINT', () => console.log('program got SIGINT'));
      process.on('SIGTERM', () => { console.log('program exits'); process.exit(3); });
      setInterval(() => {}, 1000);
    `);
    await c.ready;
    c.process.kill('SIGINT');
    await waitFor(() => c.output().includes('program got SIGINT'), { what: "the program's own handler" });
    expect(ran('handled')).toBe(''); // still running, as the program asked
    c.process.kill('SIGTERM');
    expect(await c.exited).toBe(3);
    expect(ran('handled')).toBe('ran\n');
  });
});
