import { startBroker } from '../../broker/app.js';
import { loadConfig } from '../../broker/config.js';
import { installCrashPolicy } from '../../broker/node/crash-policy.js';
import { parse } from '../args.js';

/** Hard limit on a drain: past it the process exits even if something hangs. */
const EXIT_DEADLINE_MS = 10_000;

/** `workbench broker`: one node, configured from the environment; SIGTERM/SIGINT drain it. */
export async function brokerCommand(argv: string[]): Promise<number | undefined> {
  parse(argv, {});
  const config = loadConfig();
  const node = await startBroker(config);
  let stopping = false;
  const shutdown = (reason: string, exitCode: number) => {
    if (stopping) return;
    stopping = true;
    node.log.info({ reason }, 'shutdown requested');
    const deadline = setTimeout(() => {
      node.log.error('drain did not finish in time; exiting');
      process.exit(1);
    }, EXIT_DEADLINE_MS);
    deadline.unref();
    node.stop().then(
      () => process.exit(exitCode),
      (error) => {
        node.log.error({ err: error }, 'drain failed');
        process.exit(1);
      },
    );
  };
  installCrashPolicy({ log: node.log, metrics: node.metrics, shutdown });
  process.once('SIGTERM', () => shutdown('SIGTERM', 0));
  process.once('SIGINT', () => shutdown('SIGINT', 0));
  return undefined; // keeps running until a signal
}
