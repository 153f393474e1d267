/**
 * Who `workbench mcp host|connect` is on the mesh, and where: member I of the file `workbench mesh create
 * NAME --members K --out FILE` wrote (`{meshId, name, members:[{pubkey, secretKey}]}`), and the WebSocket
 * URL (`--url`, else the local cluster's load balancer from `.workbench/cluster.json`). Every mistake is a
 * UsageError (exit 2) that says what was expected, before anything connects.
 */
import { readFileSync } from 'node:fs';
import type { MemberKeys } from '@mesh-broker/sdk';
import { UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { normalizeUrl } from '../load/target.js';

export interface MeshMember {
  meshId: string;
  keys: MemberKeys;
  index: number;
}

const HEX64 = /^[0-9a-f]{64}$/;

export function readMeshMember(file: string | undefined, member: string | undefined): MeshMember {
  if (file === undefined)
    throw new UsageError('--mesh FILE is required (written by "workbench mesh create --out FILE")');
  if (member === undefined)
    throw new UsageError('--member I is required (the index of a member in the mesh file)');
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read the mesh file ${file}: ${(error as Error).message}`);
  }
  let mesh: { meshId?: unknown; members?: unknown };
  try {
    mesh = JSON.parse(text) as typeof mesh;
  } catch {
    throw new UsageError(`${file} is not JSON (expected what "workbench mesh create --out FILE" writes)`);
  }
  if (typeof mesh?.meshId !== 'string' || !Array.isArray(mesh.members))
    throw new UsageError(
      `${file} has no meshId and members (expected what "workbench mesh create --out FILE" writes)`,
    );
  const count = mesh.members.length;
  if (!/^\d+$/.test(member) || Number(member) >= count)
    throw new UsageError(
      `--member must be a member's index in ${file}: 0 to ${count - 1} (${count} members)`,
    );
  const index = Number(member);
  const keys = mesh.members[index] as Partial<MemberKeys> | undefined;
  if (
    typeof keys?.pubkey !== 'string' ||
    !HEX64.test(keys.pubkey) ||
    typeof keys.secretKey !== 'string' ||
    !HEX64.test(keys.secretKey)
  )
    throw new UsageError(`member ${index} of ${file} has no valid pubkey and secretKey (64 hex digits each)`);
  return { meshId: mesh.meshId, keys: { pubkey: keys.pubkey, secretKey: keys.secretKey }, index };
}

/** `--url` (http(s) or ws(s), with or without /ws), else the local cluster's load balancer. */
export function meshUrl(url: string | undefined): string {
  if (url !== undefined) return normalizeUrl(url).ws;
  const cluster = readCluster();
  if (!cluster)
    throw new UsageError(
      'no --url, and no local cluster here (.workbench/cluster.json): give --url or run "workbench up"',
    );
  return normalizeUrl(cluster.lb.url).ws;
}
