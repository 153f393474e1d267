import { writeFileSync } from 'node:fs';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { createPool } from '../../broker/db/pool.js';
import { Directory } from '../../broker/identity/directory.js';
import { defineCommand, type OptionSpec, type Parsed, positiveInt, UsageError } from '../args.js';
import { databaseUrlFor } from '../database.js';

/** `workbench mesh create NAME --members K [--out FILE]`: a mesh and K members with fresh keys. */
const OPTIONS = {
  members: { type: 'string', value: 'K', help: 'how many members (1 to 10000; required)' },
  out: { type: 'string', value: 'FILE', help: 'write the mesh and its keys there instead of stdout' },
  'database-url': {
    type: 'string',
    value: 'URL',
    help: "the database (default: DATABASE_URL, the local cluster's)",
  },
} as const satisfies OptionSpec;

export const meshCommand = defineCommand({
  synopsis: ['mesh create NAME --members K [--out FILE] [--database-url URL]'],
  about: `Creates a mesh with K members and fresh ed25519 keys; prints (or writes, mode 0600) their keys.`,
  options: OPTIONS,
  run: runMeshCommand,
});

async function runMeshCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  const [action, name, ...extra] = positionals;
  if (action !== 'create') throw new UsageError(`unknown mesh action "${action ?? ''}" (expected "create")`);
  if (!name) throw new UsageError('mesh create needs a NAME');
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (values.members === undefined) throw new UsageError('mesh create needs --members K');
  const count = positiveInt('--members', values.members, 0);
  if (count > 10_000) throw new UsageError('--members must be at most 10000');

  const pool = createPool(databaseUrlFor(values['database-url']), { max: 2 });
  try {
    const directory = new Directory(pool);
    const mesh = await directory.createMesh(name);
    const members = [];
    for (let i = 0; i < count; i++) {
      const keys = generateMemberKeys();
      await directory.addMember(mesh.meshId, keys.pubkey, `${name}-${i + 1}`);
      members.push(keys);
    }
    const json = `${JSON.stringify({ meshId: mesh.meshId, name: mesh.name, members }, null, 2)}\n`;
    if (values.out) {
      writeFileSync(values.out, json, { mode: 0o600 });
      console.log(`mesh "${name}" (${mesh.meshId}) with ${count} members written to ${values.out}`);
    } else {
      process.stdout.write(json);
    }
    return 0;
  } finally {
    await pool.end();
  }
}
