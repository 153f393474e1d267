/**
 * A process as PID 1 of its own PID namespace, as in a container without an init: the kernel delivers
 * to it only the signals it installed a handler for (SIGKILL aside), so SIGTERM without a handler is
 * silently ignored. `unshare --pid --fork --mount-proc` (util-linux, needs root or user namespaces).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { waitFor } from './wait.js';

/** Whether this machine can make PID namespaces (a test that needs one is skipped, and says so, when not). */
export function canRunAsPid1(): boolean {
  const probe = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', '--kill-child', 'true'], {
    stdio: 'ignore',
  });
  return probe.status === 0;
}

/** `command args` as PID 1 of a new PID namespace; the returned child is `unshare`, which waits for it. */
export function spawnAsPid1(command: string, args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  // --kill-child: a test that SIGKILLs `unshare` in its clean-up takes the namespace's processes with it.
  return spawn('unshare', ['--pid', '--fork', '--mount-proc', '--kill-child', command, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/**
 * The host PID of the namespace's init (unshare's only child), checked to be PID 1 inside its namespace:
 * signals are sent to it directly, as a container engine sends `docker stop`'s SIGTERM.
 */
export async function namespaceInitPid(unshare: ChildProcess): Promise<number> {
  const pid = unshare.pid;
  if (pid === undefined) throw new Error('unshare did not start');
  const child = await waitFor(
    () => {
      try {
        return Number(readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0]) || 0;
      } catch {
        return 0;
      }
    },
    { timeoutMs: 5000, what: "unshare's child" },
  );
  const nsPid = readFileSync(`/proc/${child}/status`, 'utf8').match(/^NSpid:\s+(.+)$/m)?.[1];
  const inner = nsPid?.trim().split(/\s+/).at(-1);
  if (inner !== '1') throw new Error(`process ${child} is PID ${inner} in its namespace, not 1`);
  return child;
}
