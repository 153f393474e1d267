/**
 * `workbench fuzz [--url URL --admin-token T] [--seed S] [--frames N] [--requests N] [--abuse CASES]
 * [--abuse-seconds N] [--rss-bound-mib N] [--json]`: a seeded protocol fuzz against one node (default: the
 * local cluster's first node): bad WebSocket frames as a real member of a fresh mesh, then bad HTTP
 * requests, then the resource-abuse cases (fuzz/abuse.ts; `--abuse none` skips them), each judged by the
 * node's memory while good peers keep being served. Prints the seed, what was sent and every finding;
 * exits 1 when there is one. The same seed sends the same frames: a finding is replayed with `--seed`.
 */
import { generateMemberKeys, type MemberKeys } from '@mesh-broker/sdk';
import { defineCommand, type OptionSpec, type Parsed, positiveInt, UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { ABUSE_CASES, type AbuseCase, type AbuseResult, runAbuseCases } from '../fuzz/abuse.js';
import { runFuzz } from '../fuzz/run.js';

const OPTIONS = {
  url: { type: 'string', value: 'URL', help: "the node (default: the local cluster's first node)" },
  'admin-token': {
    type: 'string',
    value: 'T',
    help: "its admin token (default: ADMIN_TOKEN, the local cluster's)",
  },
  seed: {
    type: 'string',
    value: 'S',
    help: 'the seed (default: random, printed); the same seed sends the same frames',
  },
  frames: { type: 'string', value: 'N', help: 'bad WebSocket frames to send (default 2000)' },
  requests: { type: 'string', value: 'N', help: 'bad HTTP requests to send (default 200)' },
  abuse: {
    type: 'string',
    value: 'CASES',
    help: 'resource-abuse cases, comma-separated, or none (default: all)',
  },
  'abuse-seconds': { type: 'string', value: 'N', help: 'seconds per abuse case (default 5)' },
  'rss-bound-mib': { type: 'string', value: 'N', help: "the node's RSS growth bound in MiB (default 100)" },
  json: { type: 'boolean', help: 'the report as one JSON document' },
} as const satisfies OptionSpec;

export const fuzzCommand = defineCommand({
  synopsis: [
    'fuzz [--url URL --admin-token T] [--seed S] [--frames N] [--requests N] [--json]',
    '     [--abuse amplification,slow-reader,flood|none] [--abuse-seconds 5] [--rss-bound-mib 100]',
  ],
  about: `Seeded bad frames and HTTP requests, then resource abuse, against one node (default: the local cluster's
first); exit 1 on a finding (an answer out of protocol, RSS past the bound).`,
  options: OPTIONS,
  run: runFuzzCommand,
});

async function runFuzzCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.seed !== undefined && !/^\d{1,9}$/.test(values.seed))
    throw new UsageError('--seed must be a whole number below 1e9');
  const cluster = values.url ? undefined : readCluster();
  const url = (values.url ?? cluster?.nodes[0]?.url)?.replace(/\/$/, '');
  const adminToken = values['admin-token'] ?? process.env.ADMIN_TOKEN ?? cluster?.adminToken;
  if (!url) throw new UsageError('needs --url (no local cluster here)');
  if (!/^https?:\/\//.test(url)) throw new UsageError('--url must be an http(s) URL');
  if (!adminToken)
    throw new UsageError('needs --admin-token (or ADMIN_TOKEN) to create the mesh it fuzzes in');
  const seed = values.seed === undefined ? Math.floor(Math.random() * 1e9) : Number(values.seed);
  const frames = positiveInt('--frames', values.frames, 2000);
  const requests = positiveInt('--requests', values.requests, 200);
  const cases = abuseCases(values.abuse);
  const abuseSeconds = positiveInt('--abuse-seconds', values['abuse-seconds'], 5);
  const rssBoundBytes = positiveInt('--rss-bound-mib', values['rss-bound-mib'], 100) * 1024 * 1024;

  const admin = async (path: string, body: unknown) => {
    const response = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
    return (await response.json()) as Record<string, string>;
  };
  const { meshId } = await admin('/admin/meshes', { name: `fuzz-${seed}-${Date.now()}` });
  const [member, peer] = [generateMemberKeys(), generateMemberKeys()];
  const attackers = [generateMemberKeys(), generateMemberKeys(), generateMemberKeys()];
  const good: [MemberKeys, MemberKeys] = [generateMemberKeys(), generateMemberKeys()];
  for (const { pubkey } of [member, peer, ...attackers, ...good])
    await admin(`/admin/meshes/${meshId}/members`, { pubkey });

  const report = await runFuzz({
    url,
    meshId: meshId!,
    member,
    peer: peer.pubkey,
    adminToken,
    seed,
    frames,
    requests,
  });
  const abuse =
    cases.length === 0
      ? { results: [] as AbuseResult[], findings: [] }
      : await runAbuseCases({
          url,
          meshId: meshId!,
          attackers,
          good,
          seconds: abuseSeconds,
          rssBoundBytes,
          cases,
        });
  report.findings.push(...abuse.findings);
  if (values.json) console.log(JSON.stringify({ ...report, abuse: abuse.results }, null, 2));
  else {
    console.log(
      `fuzz seed ${seed}: ${report.frames.sent} bad frames (${report.frames.errors} answered with an error, ${report.frames.closes} with a close), ${report.requests.sent} bad requests (${Object.entries(
        report.requests.byStatus,
      )
        .map(([status, n]) => `${n}× ${status}`)
        .join(', ')})`,
    );
    for (const result of abuse.results)
      console.log(
        `  abuse ${result.case}: RSS +${(result.rssPeakGrowthBytes / 1048576).toFixed(1)} MiB at peak, ${result.goodDms} good DMs (slowest ${result.goodDmMaxMs} ms), ${Object.entries(
          result.attack,
        )
          .map(([what, n]) => `${what} ${n}`)
          .join(', ')}`,
      );
    for (const finding of report.findings.slice(0, 50))
      console.log(`  finding #${finding.index} ${finding.kind}: ${finding.problem}`);
    console.log(
      report.findings.length === 0
        ? 'fuzz: no findings'
        : `fuzz: ${report.findings.length} finding(s); replay with --seed ${seed}`,
    );
  }
  return report.findings.length === 0 ? 0 : 1;
}

function abuseCases(value: string | undefined): AbuseCase[] {
  if (value === undefined) return [...ABUSE_CASES];
  if (value === 'none') return [];
  const names = value.split(',').map((name) => name.trim());
  for (const name of names)
    if (!(ABUSE_CASES as readonly string[]).includes(name))
      throw new UsageError(`--abuse: unknown case "${name}" (cases: ${ABUSE_CASES.join(', ')}, or none)`);
  return names as AbuseCase[];
}
