import { verifyMesh } from '../../broker/audit/verify.js';
import { createPool } from '../../broker/db/pool.js';
import { parse, UsageError } from '../args.js';
import { databaseUrlFor } from '../database.js';

/**
 * `workbench audit verify [--mesh ID] [--json]`: walks each mesh's chain straight from Postgres,
 * independent of any node. Prints one line per mesh; exits 1 when any chain is broken or forked.
 */
export async function auditCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    mesh: { type: 'string' },
    json: { type: 'boolean' },
    'database-url': { type: 'string' },
  });
  const [action, ...extra] = positionals;
  if (action !== 'verify') throw new UsageError(`unknown audit action "${action ?? ''}" (expected "verify")`);
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (values.mesh !== undefined && !/^[0-9a-f-]{36}$/i.test(values.mesh))
    throw new UsageError('--mesh must be a mesh id (UUID)');

  const pool = createPool(databaseUrlFor(values['database-url']), {
    max: 2,
    applicationName: 'workbench-audit',
  });
  try {
    const meshIds =
      values.mesh !== undefined
        ? [values.mesh]
        : (
            await pool.query<{ meshId: string }>(
              'SELECT DISTINCT mesh_id AS "meshId" FROM audit_log ORDER BY 1',
            )
          ).rows.map((r) => r.meshId);
    let healthy = true;
    const results = [];
    for (const meshId of meshIds) {
      const result = await verifyMesh(pool, meshId);
      healthy &&= result.valid;
      results.push({ meshId, ...result });
      if (values.json) continue;
      if (result.valid) {
        console.log(`ok      ${meshId}  ${result.entries} entries, head seq ${result.head?.seq ?? 0}`);
        continue;
      }
      console.log(`BROKEN  ${meshId}  ${result.entries} entries`);
      if (result.brokenAt) {
        console.log(
          `  first broken row: seq ${result.brokenAt.seq} (row id ${result.brokenAt.id}): ${result.brokenAt.reason}`,
        );
      }
      for (const fork of result.forks) {
        console.log(`  fork: rows ${fork.rowIds.join(', ')} share the same ${fork.kind} (seq ${fork.seq})`);
      }
    }
    if (values.json) console.log(JSON.stringify({ valid: healthy, meshes: results }, null, 2));
    else if (meshIds.length === 0) console.log('no audit entries');
    return healthy ? 0 : 1;
  } finally {
    await pool.end();
  }
}
