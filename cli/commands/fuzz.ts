/**
 * `workbench fuzz [--url URL --admin-token T] [--seed S] [--frames N] [--requests N] [--json]`: a seeded
 * protocol fuzz against one node (default: the local cluster's first node): bad WebSocket frames as a real
 * member of a fresh mesh, then bad HTTP requests. Prints the seed, what was sent and every finding; exits 1
 * when there is one. The same seed sends the same frames: a finding is replayed with `--seed`.
 */
import { generateMemberKeys } from '../../client/keys.js';
import { parse, positiveInt, UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { runFuzz } from '../fuzz/run.js';

export async function fuzzCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    url: { type: 'string' },
    'admin-token': { type: 'string' },
    seed: { type: 'string' },
    frames: { type: 'string' },
    requests: { type: 'string' },
    json: { type: 'boolean' },
  });
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
  for (const { pubkey } of [member, peer]) await admin(`/admin/meshes/${meshId}/members`, { pubkey });

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
  if (values.json) console.log(JSON.stringify(report, null, 2));
  else {
    console.log(
      `fuzz seed ${seed}: ${report.frames.sent} bad frames (${report.frames.errors} answered with an error, ${report.frames.closes} with a close), ${report.requests.sent} bad requests (${Object.entries(
        report.requests.byStatus,
      )
        .map(([status, n]) => `${n}× ${status}`)
        .join(', ')})`,
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
