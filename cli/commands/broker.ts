import { type BrokerNode, StartupError, startBroker } from '../../broker/app.js';
import { loadConfig } from '../../broker/config.js';
import { createLogger } from '../../broker/log.js';
import { installCrashPolicy } from '../../broker/node/crash-policy.js';
import { secretValues } from '../../broker/secrets/redact.js';
import { defineCommand, type OptionSpec, type Parsed } from '../args.js';

/** Hard limit on a drain: past it the process exits even if something hangs. */
const EXIT_DEADLINE_MS = 10_000;
/**
 * A failed start closes what it opened, so the process ends by itself; should some handle still be open
 * (a library's timer), it exits anyway this long after the failure was logged, never hanging unhealthy.
 */
const FAILED_START_EXIT_MS = 2000;

/**
 * `workbench broker`: one node, configured from the environment; SIGTERM/SIGINT drain it.
 *
 * The signal handlers are installed before the node starts: as PID 1 (a container without an init) the
 * kernel delivers no signal the process has no handler for, so a node still waiting for Postgres would
 * otherwise ignore `docker stop` until it is killed.
 */
const OPTIONS = {} as const satisfies OptionSpec;

export const brokerCommand = defineCommand({
  synopsis: ['broker'],
  about: `One broker node, configured from the environment (README: PORT, DATABASE_URL, ADMIN_TOKEN, NODE_ID, …).
SIGTERM or SIGINT drains it; exit 2 on bad configuration, naming the variable.`,
  options: OPTIONS,
  run: runBrokerCommand,
});

async function runBrokerCommand(_parsed: Parsed<typeof OPTIONS>): Promise<number | undefined> {
  const config = loadConfig();
  // main has read every X_FILE into process.env: the values to keep out of the log are all there.
  const log = createLogger(config.nodeId, config.logLevel, secretValues(process.env));
  let node: BrokerNode | undefined;
  let starting: Promise<BrokerNode> | undefined;
  let listening = false;
  let stopping = false;
  const shutdown = (reason: string, exitCode: number) => {
    if (stopping) return;
    stopping = true;
    if (!listening) {
      // Not listening yet: no peer can be connected and nothing is served, so there is nothing to drain.
      log.info({ reason }, 'shutdown requested during start-up; exiting');
      process.exit(exitCode);
    }
    log.info({ reason }, 'shutdown requested');
    const deadline = setTimeout(() => {
      log.error('drain did not finish in time; exiting');
      process.exit(1);
    }, EXIT_DEADLINE_MS);
    deadline.unref();
    // A node that listens but is still finishing its start may already hold peers: it is stopped, and
    // so drained, once started.
    (node ? Promise.resolve(node) : (starting as Promise<BrokerNode>))
      .then((started) => started.stop())
      .then(
        () => process.exit(exitCode),
        (error) => {
          log.error({ err: error }, 'drain failed');
          process.exit(1);
        },
      );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM', 0));
  process.once('SIGINT', () => shutdown('SIGINT', 0));

  try {
    starting = startBroker(config, { log, onListening: () => (listening = true) });
    node = await starting;
  } catch (error) {
    // The cause itself: pino's serializer would repeat a wrapped cause's message in the line.
    const { step, cause } = error instanceof StartupError ? error : { step: undefined, cause: error };
    log.fatal({ step, err: cause }, `${(error as Error).message}; exiting`);
    // An unref'd timer fires only while something else keeps the process alive: the backstop.
    setTimeout(() => process.exit(1), FAILED_START_EXIT_MS).unref();
    throw error; // main prints the reason on stderr and exits 1
  }
  installCrashPolicy({ log: node.log, metrics: node.metrics, shutdown });
  return undefined; // keeps running until a signal
}
