/**
 * `workbench load`: synthetic peers over fresh meshes against a cluster (its load balancer or chosen
 * nodes), with a delivery checker: every accepted message reached every intended recipient, exactly once
 * after SDK dedup, in each sender's order. Prints one summary line (or `--json`); exits 1 when anything was
 * lost, duplicated or reordered, 2 when called wrongly (before anything is created).
 */
import { durationOption, parse, UsageError } from '../args.js';
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

export async function loadCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    url: { type: 'string' },
    nodes: { type: 'string' },
    'admin-url': { type: 'string' },
    'admin-token': { type: 'string' },
    peers: { type: 'string' },
    meshes: { type: 'string' },
    'dm-rate': { type: 'string' },
    'broadcast-rate': { type: 'string' },
    'stream-rate': { type: 'string' },
    duration: { type: 'string' },
    'max-messages': { type: 'string' },
    drain: { type: 'string' },
    json: { type: 'boolean' },
  });
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const peers = wholeInRange('--peers', values.peers, 20, 2, 10_000);
  const meshes = wholeInRange('--meshes', values.meshes, 2, 1, 1000);
  if (peers < 2 * meshes)
    throw new UsageError('--peers must be at least twice --meshes (each mesh needs 2 peers)');
  const rates: Record<Kind, number> = {
    dm: nonNegative('--dm-rate', values['dm-rate'], 10),
    broadcast: nonNegative('--broadcast-rate', values['broadcast-rate'], 2),
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

  const plans = await createLoadMeshes({ url: target.adminUrl, token: target.adminToken }, { peers, meshes });
  const checker = new DeliveryChecker();
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const facts = await generateLoad(
      { wsUrls: target.wsUrls, plans, rates, durationMs, maxMessages, drainMs, signal: stop.signal },
      checker,
    );
    const report = buildReport(checker.result(), { ...facts, peers, meshes, nodes: target.wsUrls });
    if (values.json) console.log(JSON.stringify(report, null, 2));
    else {
      console.log(summaryLine(report));
      for (const problem of report.examples)
        console.log(
          `  ${problem.what} ${problem.kind} seq ${problem.seq} from ${problem.sender.slice(0, 12)}… to ${problem.recipient.slice(0, 12)}…`,
        );
    }
    return report.ok ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
