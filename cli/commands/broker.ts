import { startBroker } from '../../broker/app.js';
import { loadConfig } from '../../broker/config.js';
import { parse } from '../args.js';

/** Hard limit on a drain: past it the process exits even if something hangs. */
const EXIT_DEADLINE_MS = 10_000;

/** `workbench broker`: one node, configured from the environment; SIGTERM/SIGINT drain it. */
export async function brokerCommand(argv: string[]): Promise<number | undefined> {
  parse(argv, {});
  const config = loadConfig();
  const node = await startBroker(config);
  const shutdown = (signal: string) => {
    node.log.info({ signal }, 'shutdown requested');
    const deadline = setTimeout(() => {
      node.log.error('drain did not finish in time; exiting');
      process.exit(1);
    }, EXIT_DEADLINE_MS);
    deadline.unref();
    node.stop().then(
      () => process.exit(0),
      (error) => {
        node.log.error({ err: error }, 'drain failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
  return undefined; // keeps running until a signal
}
