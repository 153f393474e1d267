/**
 * The admin HTTP API: meshes, members and the cluster view, behind `Authorization: Bearer <ADMIN_TOKEN>`
 * (or, during a rotation, the retiring `ADMIN_TOKEN_PREVIOUS`: docs/runbooks/rotate-admin-token.md).
 * Input is validated before anything is written; a bad request changes nothing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { hex, parseWith, storableText, uuid } from '../../protocol/parse.js';
import type { Pool } from '../db/pool.js';
import type { Directory, Member } from '../identity/directory.js';
import type { SessionsClosed } from '../identity/revocation-watch.js';
import type { ShadowReport } from '../shadow/runner.js';

export interface AdminOptions {
  adminToken: string;
  /** The token being retired, accepted too while it is set; `onPreviousTokenUsed` hears of each use. */
  adminTokenPrevious?: string;
  onPreviousTokenUsed: (request: FastifyRequest) => void;
  directory: Directory;
  pool: Pool;
  /** Ends what the rows hold of a member that was just revoked (its schedules, say): broker/rows/row.ts. */
  endOwnedWork: (member: Member) => Promise<void>;
  /** Ends every live session of a member that was just revoked (close 4403), on every node; what it closed. */
  onRevoked: (member: Member) => Promise<SessionsClosed>;
  /** Each row's shadow comparisons on this node (docs/flags.md § Shadow). */
  shadow: () => ShadowReport[];
  /** Records a change of a mesh's home region on the mesh's audit chain. */
  onHomeRegionSet: (meshId: string, change: { from: string | null; to: string | null }) => void;
}

const meshBody = z.object({ name: storableText(1, 128) });
const memberBody = z.object({ pubkey: hex(32), name: storableText(1, 128).optional() });
const meshParams = z.object({ meshId: uuid });
/** A region name as REGION spells it (broker/config.ts), or null: back to the primary's region. */
const homeRegionBody = z.object({
  region: z
    .string()
    .regex(/^[a-z0-9-]{1,32}$/, 'must be 1-32 characters of a-z, 0-9 or "-"')
    .nullable(),
});
const memberParams = z.object({ meshId: uuid, pubkey: hex(32) });

const digest = (text: string) => createHash('sha256').update(text).digest();

/**
 * Which configured token the header presents. Both are always compared, as equal-length digests in
 * constant time, so neither the answer's timing nor its length says how close a guess came or which
 * token it was.
 */
function presentedToken(header: string | undefined, current: string, previous: string | undefined) {
  const presented = digest(header?.startsWith('Bearer ') ? header.slice(7) : '');
  const isCurrent = timingSafeEqual(presented, digest(current));
  const isPrevious = timingSafeEqual(presented, digest(previous ?? current)) && previous !== undefined;
  return isCurrent ? 'current' : isPrevious ? 'previous' : undefined;
}

function publicMember(member: Member) {
  return {
    pubkey: member.pubkey,
    name: member.name,
    groups: member.groups,
    createdAt: member.createdAt,
    revokedAt: member.revokedAt,
  };
}

/** The admin scope's hook: the current token, or the retiring one (counted), or 401. */
function tokenCheck(options: AdminOptions) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    const token = presentedToken(
      request.headers.authorization,
      options.adminToken,
      options.adminTokenPrevious,
    );
    if (token === 'previous') options.onPreviousTokenUsed(request);
    if (token === undefined) {
      return reply.code(401).header('www-authenticate', 'Bearer').send({
        error: 'unauthorized',
        message: 'admin endpoints need Authorization: Bearer <admin token>',
      });
    }
  };
}

export function registerAdmin(app: FastifyInstance, options: AdminOptions): void {
  const { directory } = options;

  app.register(async (admin) => {
    admin.addHook('onRequest', tokenCheck(options));

    admin.post('/admin/meshes', async (request, reply) => {
      const body = parseWith(meshBody, request.body);
      return reply.code(201).send(await directory.createMesh(body.name));
    });

    admin.get('/admin/meshes', async () => ({ meshes: await directory.listMeshes() }));

    admin.get('/admin/meshes/:meshId', async (request, reply) => {
      const { meshId } = parseWith(meshParams, request.params);
      const mesh = await directory.getMesh(meshId);
      if (!mesh) return reply.code(404).send({ error: 'not_found', message: `no mesh ${meshId}` });
      return { ...mesh, members: (await directory.listMembers(meshId)).map(publicMember) };
    });

    // The home region is read by every node's regions row within a second (docs/multi-region.md); an
    // unchanged value is answered but not audited.
    admin.put('/admin/meshes/:meshId/home-region', async (request, reply) => {
      const { meshId } = parseWith(meshParams, request.params);
      const { region } = parseWith(homeRegionBody, request.body);
      const change = await directory.setHomeRegion(meshId, region);
      if (!change) return reply.code(404).send({ error: 'not_found', message: `no mesh ${meshId}` });
      if (change.from !== change.to) options.onHomeRegionSet(meshId, change);
      return { meshId, homeRegion: change.to };
    });

    admin.post('/admin/meshes/:meshId/members', async (request, reply) => {
      const { meshId } = parseWith(meshParams, request.params);
      const body = parseWith(memberBody, request.body);
      return reply.code(201).send(publicMember(await directory.addMember(meshId, body.pubkey, body.name)));
    });

    admin.get('/admin/meshes/:meshId/members', async (request) => {
      const { meshId } = parseWith(meshParams, request.params);
      return { members: (await directory.listMembers(meshId)).map(publicMember) };
    });

    admin.post('/admin/meshes/:meshId/members/:pubkey/revoke', async (request, reply) => {
      const { meshId, pubkey } = parseWith(memberParams, request.params);
      const member = await directory.revokeMember(meshId, pubkey);
      if (!member)
        return reply.code(404).send({ error: 'not_found', message: `no member ${pubkey} in ${meshId}` });
      // Revocation stops the background work the member owns, on every node: the rows end it in Postgres
      // (its schedules cancelled, its watches ended), which every scheduler and watch poller re-reads
      // before it fires or fetches (and both already skip a revoked member's rows, so a create racing the
      // revocation is covered). Its sessions are closed by `onRevoked`, here and over the bus; the answer
      // says how many each node closed (and which nodes did not answer in time: they close on their own
      // re-read of revocations, within REVOCATION_RECHECK_MS).
      await options.endOwnedWork(member);
      const sessionsClosed = await options.onRevoked(member);
      return { ...publicMember(member), sessionsClosed };
    });

    // Shadow mode: per row with a comparator, the counts, the agreement ratio and the last mismatches.
    admin.get('/admin/shadow', async () => ({ rows: options.shadow() }));

    admin.get('/admin/cluster', async () => {
      const result = await options.pool.query(
        `SELECT id, url, started_at AS "startedAt", heartbeat_at AS "heartbeatAt", stopped_at AS "stoppedAt", info,
                (SELECT count(*)::int FROM presence p WHERE p.node_id = n.id AND p.disconnected_at IS NULL) AS sessions
           FROM nodes n ORDER BY id`,
      );
      return { nodes: result.rows };
    });
  });
}
