/**
 * A node's life as one ordered list of steps: started in list order, stopped in reverse. A step that fails
 * to start stops every step again (each stop is safe on what never started) and the start rejects with a
 * StartupError naming the step.
 */
import type { Logger } from '../log.js';

/** One step of the node's life. */
export interface Step {
  name: string;
  start?: () => Promise<void>;
  stop?: () => Promise<void>;
}

/** A start that failed: which step, and why (the cause's message, so the one line an operator sees says it). */
export class StartupError extends Error {
  constructor(
    readonly step: string,
    cause: unknown,
  ) {
    super(`start-up failed (${step}): ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'StartupError';
  }
}

/** Starts the steps in order; resolves to the node's `stop` (once, whoever calls it first). */
export async function runSteps(steps: readonly Step[], log: Logger): Promise<() => Promise<void>> {
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      for (const step of [...steps].reverse()) {
        await step.stop?.().catch((error) => log.warn({ err: error, step: step.name }, 'stopping failed'));
      }
      log.info('node stopped');
    })();
    return stopping;
  };
  for (const step of steps) {
    try {
      await step.start?.();
    } catch (error) {
      // Every step's stop is safe on what never started; stopping them all also covers a step that
      // started half (a flag provider whose client exists, a socket that is bound).
      log.warn({ step: step.name }, 'start-up failed; closing what was opened');
      await stop();
      throw new StartupError(step.name, error);
    }
  }
  return stop;
}
