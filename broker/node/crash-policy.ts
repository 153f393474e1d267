/**
 * What a broker process does with an error nothing handled (SECURITY.md § Crash policy).
 *
 * - An **unhandled rejection** is a promise whose failure nobody awaited: the work it belonged to has
 *   already failed on its own, and nothing else shares its state. The node logs it, counts it and keeps
 *   serving; one peer's odd request (or a library's stray fetch) must not end every other peer's session.
 * - An **uncaught exception** was thrown out of a callback mid-way: what that code was changing may be
 *   half done, and nothing can tell which invariant it broke. The node logs it, counts it, drains as it
 *   would on SIGTERM and exits 1, for its supervisor (systemd, the container's restart policy) to start
 *   a clean process. Peers reconnect elsewhere or here, resuming from Postgres.
 */
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';

export interface CrashPolicyTarget {
  log: Logger;
  metrics: BrokerMetrics;
  /** Drains and exits with the given code (the same path as SIGTERM). */
  shutdown(reason: string, exitCode: number): void;
}

/** Installs the policy on this process; returns a function that removes it (tests). */
export function installCrashPolicy(target: CrashPolicyTarget): () => void {
  const onRejection = (reason: unknown) => {
    target.metrics.unexpectedErrors.inc({ kind: 'unhandled_rejection' });
    target.log.error({ err: reason }, 'unhandled promise rejection; the node keeps serving');
  };
  let exiting = false;
  const onException = (error: Error) => {
    target.metrics.unexpectedErrors.inc({ kind: 'uncaught_exception' });
    target.log.fatal({ err: error }, 'uncaught exception; draining and exiting for a restart');
    if (exiting) return;
    exiting = true;
    target.shutdown('uncaught exception', 1);
  };
  process.on('unhandledRejection', onRejection);
  process.on('uncaughtException', onException);
  return () => {
    process.off('unhandledRejection', onRejection);
    process.off('uncaughtException', onException);
  };
}
