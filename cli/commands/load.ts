/**
 * `workbench load`: synthetic peers over fresh meshes against a cluster (its load balancer or chosen
 * nodes), with a delivery checker: every accepted message reached every intended recipient, exactly once
 * after SDK dedup, in each sender's order. Prints one summary line (or `--json`); exits 1 when anything was
 * lost, duplicated or reordered, 2 when called wrongly (before anything is created). `--history FILE`
 * records every operation (docs/chaos.md § History) for `workbench chaos check FILE`.
 */
import { defineCommand, durationOption, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { HistoryWriter } from '../history/writer.js';
import { DeliveryChecker, type Kind } from '../load/checker.js';
import { generateLoad } from '../load/generator.js';
import { buildReport, summaryLine } from '../load/report.js';
import { createLoadMeshes } from '../load/setup.js';
import { resolveTarget } from '../load/target.js';

/** A number ≥ 0 (rates may be fractional, e.g. 0.5 per second). */
function nonNegative(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+(\.\d+)?$/.test(value)) throw new UsageError(`${name} must be a number ≥ 0`);
  return Number(value);
}

function wholeInRange(name: string, value: string | undefined, fallback: number, min: number, max: number) {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max)
    throw new UsageError(`${name} must be a whole number from ${min} to ${max}`);
  return Number(value);
}

const OPTIONS = {
  url: { type: 'string', value: 'URL', help: 'one URL the peers connect to (e.g. the load balancer)' },
  nodes: {
    type: 'string',
    value: 'URL,URL',
    help: 'nodes to spread the peers over (peer i on node i mod K)',
  },
  'admin-url': {
    type: 'string',
    value: 'URL',
    help: 'where the meshes are created (default: the first target)',
  },
  'admin-token': {
    type: 'string',
    value: 'T',
    help: "the admin token (default: ADMIN_TOKEN, the local cluster's)",
  },
  peers: { type: 'string', value: 'N', help: 'peers in all (default 20)' },
  meshes: { type: 'string', value: 'M', help: 'meshes (default 2; at least 2 peers each)' },
  'dm-rate': { type: 'string', value: 'R', help: 'DMs per second over all peers (default 10)' },
  'broadcast-rate': { type: 'string', value: 'R', help: 'broadcasts per second (default 2)' },
  'stream-rate': { type: 'string', value: 'R', help: 'stream publishes per second (default 10)' },
  duration: { type: 'string', value: 'D', help: 'how long to send (default 10s)' },
  'max-messages': { type: 'string', value: 'N', help: 'stop after this many messages (default 100000)' },
  drain: { type: 'string', value: 'D', help: 'how long to wait for what is still owed (default 5s)' },
  history: { type: 'string', value: 'FILE', help: 'record every operation to FILE (JSON lines)' },
  json: { type: 'boolean', help: 'the report as one JSON document' },
} as const satisfies OptionSpec;

export const loadCommand = defineCommand({
  synopsis: [
    'load [--url URL | --nodes URL,URL] [--peers N] [--meshes M] [--dm-rate R] [--broadcast-rate R]',
    '     [--stream-rate R] [--duration 30s] [--max-messages N] [--drain 5s] [--admin-token T]',
    '     [--history FILE] [--json]',
  ],
  about: `Synthetic peers over fresh meshes with a delivery checker; exit 1 if a message was lost, duplicated or
reordered, 2 when called wrongly (before anything is created).`,
  options: OPTIONS,
  run: runLoadCommand,
});

async function runLoadCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const peers = wholeInRange('--peers', values.peers, 20, 2, 10_000);
  const meshes = wholeInRange('--meshes', values.meshes, 2, 1, 1000);
  if (peers < 2 * meshes)
    throw new UsageError('--peers must be at least twice --meshes (each mesh needs 2 peers)');
  const rates: Record<Kind, number> = {
    dm: nonNegative('--dm-rate', values['dm-rate'], 10),
    broadcast: nonNegative('--broadcast-rate', values['broadcast-rate'], 2),
    group: 0,
    stream: nonNegative('--stream-rate', values['stream-rate'], 10),
  };
  if (rates.dm + rates.broadcast + rates.stream === 0)
    throw new UsageError('every rate is 0: nothing to send');
  const durationMs = durationOption('--duration', values.duration, 10_000);
  const maxMessages = wholeInRange('--max-messages', values['max-messages'], 100_000, 1, 10_000_000);
  const drainMs = durationOption('--drain', values.drain, 5000);
  const target = resolveTarget({
    url: values.url,
    nodes: values.nodes,
    adminUrl: values['admin-url'],
    adminToken: values['admin-token'],
  });

  // Opened before anything is created: a path that cannot be written is a wrong call.
  let history: HistoryWriter | undefined;
  if (values.history !== undefined) {
    try {
      history = new HistoryWriter(values.history);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
  }
  const plans = await createLoadMeshes({ url: target.adminUrl, token: target.adminToken }, { peers, meshes });
  const checker = new DeliveryChecker();
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const facts = await generateLoad(
      { wsUrls: target.wsUrls, plans, rates, durationMs, maxMessages, drainMs, signal: stop.signal, history },
      checker,
    );
    // A history that could not be written whole fails the run (exit 1), whatever the checker says.
    const historyError = closeHistory(history);
    const report = buildReport(checker.result(), { ...facts, peers, meshes, nodes: target.wsUrls });
    if (values.json) console.log(JSON.stringify(report, null, 2));
    else {
      console.log(summaryLine(report));
      for (const problem of report.examples)
        console.log(
          `  ${problem.what} ${problem.kind} seq ${problem.seq} from ${problem.sender.slice(0, 12)}… to ${problem.recipient.slice(0, 12)}…`,
        );
    }
    if (historyError) console.error(`load: ${historyError}`);
    else if (history && !values.json) console.log(`history: ${history.count} operations in ${history.path}`);
    return report.ok && !historyError ? 0 : 1;
  } finally {
    closeHistory(history); // a run that failed before: closed, its error already beside the point
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Closes the history; its error message if any write failed (idempotent). */
function closeHistory(history: HistoryWriter | undefined): string | undefined {
  try {
    history?.close();
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}
