import { MeshClient } from '@mesh-broker/sdk';
import { connectMcp, hostMcpServer } from '@mesh-broker/sdk/mcp';
import { defineCommand, type OptionSpec, type Parsed, UsageError } from '../args.js';
import { meshUrl, readMeshMember } from './mcp-member.js';

/**
 * `workbench mcp host|connect` (docs/mcp.md): a real stdio MCP server hosted on the mesh, and a stdio MCP
 * server exposing every tool the mesh hosts. The SDK functions (`@mesh-broker/sdk/mcp`) do the work; this
 * reads who and where, connects, and exits when the bridge ends. Logs go to stderr only: stdout of
 * `mcp connect` is the MCP channel.
 */
const OPTIONS = {
  mesh: {
    type: 'string',
    value: 'FILE',
    help: 'the mesh file "workbench mesh create --out FILE" wrote (required)',
  },
  member: {
    type: 'string',
    value: 'I',
    help: 'which member of it to be: its index, 0 for the first (required)',
  },
  url: {
    type: 'string',
    value: 'URL',
    help: "the broker's WebSocket or HTTP URL (default: the local cluster's load balancer)",
  },
  server: {
    type: 'string',
    value: 'NAME',
    help: "host: the mesh server name (default: the MCP server's own name)",
  },
} as const satisfies OptionSpec;

export const mcpCommand = defineCommand({
  synopsis: [
    'mcp host --mesh FILE --member I [--url URL] [--server NAME] -- COMMAND [ARGS]',
    'mcp connect --mesh FILE --member J [--url URL]',
  ],
  about: `host: runs COMMAND as a stdio MCP server and hosts its tools on the mesh until it exits (exit 1) or
SIGINT/SIGTERM (exit 0). connect: a stdio MCP server on stdin/stdout exposing every tool of the mesh as
<server>__<tool>, until its client closes stdin (exit 0) or the mesh session ends (exit 1). docs/mcp.md.`,
  options: OPTIONS,
  run: runMcpCommand,
});

async function runMcpCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  const [action, ...rest] = positionals;
  if (action !== 'host' && action !== 'connect')
    throw new UsageError(`unknown mcp action "${action ?? ''}" (expected "host" or "connect")`);
  if (action === 'host' && rest.length === 0) throw new UsageError('mcp host needs -- COMMAND [ARGS]');
  if (action === 'connect' && rest.length > 0) throw new UsageError(`unexpected argument "${rest[0]}"`);
  if (action === 'connect' && values.server !== undefined) throw new UsageError('--server is for mcp host');
  const member = readMeshMember(values.mesh, values.member);
  const url = meshUrl(values.url);
  const client = new MeshClient({
    urls: [url],
    meshId: member.meshId,
    keys: member.keys,
    name: `mcp-${action}`,
  });
  await connectWithin(client, url, CONNECT_TIMEOUT_MS);
  const log = (line: string) => process.stderr.write(`workbench mcp ${action}: ${line}\n`);
  log(`member ${member.index} of mesh ${member.meshId} on ${client.node} (${url})`);
  try {
    return action === 'host' ? await host(client, rest, values.server, log) : await connect(client, log);
  } finally {
    client.close();
  }
}

/** How long the first connection may take: the SDK retries a dead URL forever, a command should not. */
const CONNECT_TIMEOUT_MS = 15_000;

async function connectWithin(client: MeshClient, url: string, timeoutMs: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no welcome from ${url} within ${timeoutMs / 1000} s`)),
      timeoutMs,
    );
  });
  try {
    await Promise.race([client.connect(), timeout]);
  } catch (error) {
    client.close();
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

async function host(
  client: MeshClient,
  command: string[],
  server: string | undefined,
  log: (line: string) => void,
) {
  const [file, ...args] = command;
  const hosted = await hostMcpServer({ client, command: file!, args, server, log });
  const stop = () => void hosted.close();
  process.once('SIGINT', stop).once('SIGTERM', stop);
  const ended = await hosted.ended;
  process.off('SIGINT', stop).off('SIGTERM', stop);
  return ended.reason === 'closed' ? 0 : 1;
}

async function connect(client: MeshClient, log: (line: string) => void) {
  let lost: string | undefined;
  client.on('closed', ({ code, reason, permanent }) => {
    if (permanent) lost = `${code} ${reason}`;
  });
  const connection = await connectMcp({ client, log });
  const stop = () => void connection.close();
  process.once('SIGINT', stop).once('SIGTERM', stop);
  await connection.closed;
  process.off('SIGINT', stop).off('SIGTERM', stop);
  if (lost !== undefined) log(`the mesh session ended: ${lost}`);
  return lost === undefined ? 0 : 1;
}
