/**
 * Meshes and their members: the identities a hello is checked against. Used by the admin API, the CLI
 * and the hello path; Postgres is the only store, so every node sees the same members.
 */

import { ProtocolError } from '../../protocol/errors.js';
import type { Pool } from '../db/pool.js';

export interface Mesh {
  meshId: string;
  name: string;
  createdAt: Date;
}

export interface Member {
  id: number;
  meshId: string;
  pubkey: string;
  name: string | null;
  groups: string[];
  createdAt: Date;
  revokedAt: Date | null;
}

/** Where a read of revocations stopped: the last revocation it saw (time, then member id). */
export interface RevocationCursor {
  revokedAt: Date;
  id: number;
}

interface RevokedRow {
  id: number | string;
  meshId: string;
  revokedAt: string;
}

const MEMBER_COLUMNS = `id, mesh_id AS "meshId", pubkey, name, groups,
  created_at AS "createdAt", revoked_at AS "revokedAt"`;

export class Directory {
  constructor(private readonly pool: Pool) {}

  async createMesh(name: string): Promise<Mesh> {
    const result = await this.pool
      .query<Mesh>(
        `INSERT INTO meshes (name) VALUES ($1) RETURNING id AS "meshId", name, created_at AS "createdAt"`,
        [name],
      )
      .catch((error: { code?: string }) => {
        if (error.code === '23505')
          throw new ProtocolError('conflict', `a mesh named "${name}" already exists`);
        throw error;
      });
    return result.rows[0]!;
  }

  async listMeshes(): Promise<Array<Mesh & { members: number }>> {
    const result = await this.pool.query<Mesh & { members: number }>(
      `SELECT m.id AS "meshId", m.name, m.created_at AS "createdAt",
              (SELECT count(*)::int FROM members WHERE mesh_id = m.id AND revoked_at IS NULL) AS members
         FROM meshes m ORDER BY m.created_at`,
    );
    return result.rows;
  }

  /**
   * Sets the mesh's home region (null: back to the primary's region, docs/multi-region.md); undefined when
   * there is no such mesh. Returns the value before and after, for the audit entry.
   */
  async setHomeRegion(
    meshId: string,
    region: string | null,
  ): Promise<{ from: string | null; to: string | null } | undefined> {
    const result = await this.pool.query<{ from: string | null; to: string | null }>(
      `UPDATE meshes m SET home_region = $2
         FROM (SELECT id, home_region FROM meshes WHERE id = $1 FOR UPDATE) old
        WHERE m.id = old.id RETURNING old.home_region AS "from", m.home_region AS "to"`,
      [meshId, region],
    );
    return result.rows[0];
  }

  async getMesh(meshId: string): Promise<(Mesh & { homeRegion: string | null }) | undefined> {
    const result = await this.pool.query<Mesh & { homeRegion: string | null }>(
      `SELECT id AS "meshId", name, created_at AS "createdAt", home_region AS "homeRegion" FROM meshes WHERE id = $1`,
      [meshId],
    );
    return result.rows[0];
  }

  async addMember(meshId: string, pubkey: string, name?: string): Promise<Member> {
    if (!(await this.getMesh(meshId))) throw new ProtocolError('not_found', `no mesh ${meshId}`);
    const result = await this.pool
      .query<Member>(
        `INSERT INTO members (mesh_id, pubkey, name) VALUES ($1, $2, $3) RETURNING ${MEMBER_COLUMNS}`,
        [meshId, pubkey, name ?? null],
      )
      .catch((error: { code?: string }) => {
        if (error.code === '23505')
          throw new ProtocolError('conflict', `member ${pubkey} is already in the mesh`);
        throw error;
      });
    return result.rows[0]!;
  }

  async listMembers(meshId: string): Promise<Member[]> {
    const result = await this.pool.query<Member>(
      `SELECT ${MEMBER_COLUMNS} FROM members WHERE mesh_id = $1 ORDER BY id`,
      [meshId],
    );
    return result.rows;
  }

  async findMember(meshId: string, pubkey: string): Promise<Member | undefined> {
    const result = await this.pool.query<Member>(
      `SELECT ${MEMBER_COLUMNS} FROM members WHERE mesh_id = $1 AND pubkey = $2`,
      [meshId, pubkey],
    );
    return result.rows[0];
  }

  /** Marks a member revoked; returns the member, or undefined when the mesh has no such member. */
  async revokeMember(meshId: string, pubkey: string): Promise<Member | undefined> {
    const result = await this.pool.query<Member>(
      `UPDATE members SET revoked_at = coalesce(revoked_at, now())
        WHERE mesh_id = $1 AND pubkey = $2 RETURNING ${MEMBER_COLUMNS}`,
      [meshId, pubkey],
    );
    return result.rows[0];
  }

  /**
   * Whether member `memberId` of mesh `meshId` is revoked, as Postgres says: what a node checks before it
   * acts on a `member.revoked` heard over the bus (a hint, never the authority to close a socket).
   */
  async isRevoked(meshId: string, memberId: number): Promise<boolean> {
    const result = await this.pool.query<{ revoked: boolean }>(
      'SELECT revoked_at IS NOT NULL AS revoked FROM members WHERE id = $1 AND mesh_id = $2',
      [memberId, meshId],
    );
    return result.rows[0]?.revoked === true;
  }

  /**
   * Revoked members after `after` (revocation time, then id), oldest first, at most `limit`; from
   * `overlapMs` before Postgres's now when `after` is undefined. `now` is Postgres's clock at the read:
   * the next read starts from it (less an overlap), so no node clock is compared with `revoked_at`.
   */
  async revokedAfter(
    after: RevocationCursor | undefined,
    overlapMs: number,
    limit: number,
  ): Promise<{ now: Date; members: Array<{ id: number; meshId: string } & RevocationCursor> }> {
    const result = await this.pool.query<{ now: Date; members: RevokedRow[] | null }>(
      `SELECT now() AS now,
              (SELECT json_agg(r) FROM (
                 SELECT id, mesh_id AS "meshId", revoked_at AS "revokedAt" FROM members
                  WHERE revoked_at IS NOT NULL
                    AND (revoked_at, id) > (coalesce($1::timestamptz, now() - $3::int * interval '1 millisecond'), $2::bigint)
                  ORDER BY revoked_at, id LIMIT $4) r) AS members`,
      [after?.revokedAt ?? null, after?.id ?? 0, overlapMs, limit],
    );
    const row = result.rows[0]!;
    return {
      now: row.now,
      members: (row.members ?? []).map((m) => ({
        id: Number(m.id),
        meshId: m.meshId,
        revokedAt: new Date(m.revokedAt),
      })),
    };
  }

  /** Remembers the groups a member declared in its latest hello, so `@group` resolves while it is offline. */
  async setGroups(memberId: number, groups: string[]): Promise<void> {
    await this.pool.query('UPDATE members SET groups = $2 WHERE id = $1 AND groups IS DISTINCT FROM $2', [
      memberId,
      groups,
    ]);
  }
}
