/**
 * Last-resort cleanup of what this process started outside itself (throw-away Postgres clusters, their data
 * folders): registered cleanups run when the process exits, however it exits short of SIGKILL, so a
 * failed or interrupted run leaves nothing behind.
 *
 * - On `exit` (normal end, `process.exit`, an uncaught exception) every registered cleanup runs.
 * - On SIGINT, SIGTERM or SIGHUP: when nothing else in the process listens for that signal, the cleanups
 *   run and the signal is raised again with the default behaviour, so the process still dies by it (exit
 *   status 128 + n, as the shell expects). When the program has its own handler (a CLI that shuts down
 *   gracefully), that handler decides: the cleanups then run at its `process.exit`, or not at all if it
 *   keeps running, which is what it asked for.
 *
 * Cleanups must be synchronous (an `exit` listener cannot wait), quick, and must not throw (a throw is
 * swallowed, so one failed cleanup never stops the others). Normal code should still release its
 * resources itself and call the function `onExit` returns to unregister.
 */

const cleanups = new Set<() => void>();
const SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
let installed = false;

function runAll(): void {
  // Newest first: what was started last usually depends on what was started before it.
  for (const cleanup of [...cleanups].reverse()) {
    cleanups.delete(cleanup);
    try {
      cleanup();
    } catch {
      // best effort: the next one still runs
    }
  }
}

function onSignal(signal: NodeJS.Signals): void {
  if (process.listenerCount(signal) > 1) return; // the program handles it (and exits through `exit`)
  runAll();
  process.off(signal, onSignal);
  process.kill(process.pid, signal);
}

function install(): void {
  if (installed) return;
  installed = true;
  process.on('exit', runAll);
  for (const signal of SIGNALS) process.on(signal, onSignal);
}

/** Runs `cleanup` when the process exits or is interrupted; the returned function unregisters it. */
export function onExit(cleanup: () => void): () => void {
  install();
  cleanups.add(cleanup);
  return () => {
    cleanups.delete(cleanup);
  };
}
