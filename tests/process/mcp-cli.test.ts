/**
 * Issue 28 item 5 as a user runs it: the real `workbench mcp host` (dist/cli/main.js) runs
 * `@modelcontextprotocol/server-everything` and hosts it from node A; an MCP SDK Client spawns the real
 * `workbench mcp connect` over StdioClientTransport against node B (two nodes with `ha.mcp`) and lists and
 * calls its tools. When the MCP server dies mid-call, the call fails, the host unregisters, exits 1, and the
 * connect side's client gets `tools/list_changed`. A bad --member is exit 2 with the valid range.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMemberKeys } from '@mesh-broker/sdk';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { useWorld, type World } from '../contract/harness.js';
import { captured, runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { descendants } from '../helpers/process.js';
import { pause, waitFor, within } from '../helpers/wait.js';

const EVERYTHING = join(packageRoot(), 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const dir = mkdtempSync(join(tmpdir(), 'wb-mcp-cli-'));
const meshFile = join(dir, 'mesh.json');
const started: ChildProcess[] = [];

afterAll(() => {
  for (const child of started)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** `workbench mcp host` of member 0 on node A running server-everything, once it registered. */
async function startHost(world: World) {
  const host = spawn(
    process.execPath,
    [
      WORKBENCH,
      'mcp',
      'host',
      '--mesh',
      meshFile,
      '--member',
      '0',
      '--url',
      world.a.wsUrl,
      '--',
      process.execPath,
      EVERYTHING,
      'stdio',
    ],
    { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  started.push(host);
  const hostOut = captured(host);
  await waitFor(() => /hosting \d+ tools as mesh server "mcp-servers-everything"/.test(hostOut.output()), {
    timeoutMs: 20_000,
    what: 'the host to register',
  });
  return { host, hostOut };
}

/** An MCP SDK client spawning `workbench mcp connect` of member 1 on node B over stdio. */
async function connectClient(world: World) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [WORKBENCH, 'mcp', 'connect', '--mesh', meshFile, '--member', '1', '--url', world.b.wsUrl],
    cwd: dir,
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr?.on('data', (chunk) => {
    log += chunk;
  });
  const mcp = new Client({ name: 'mcp-cli-test', version: '1.0.0' });
  const errors: Error[] = [];
  mcp.onerror = (error) => errors.push(error);
  const changes = { count: 0 };
  mcp.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    changes.count++;
  });
  await mcp.connect(transport);
  return { mcp, errors, changes, connectLog: () => log };
}

describe('workbench mcp host and connect', () => {
  const world = useWorld('shared', { flag: 'ha.mcp', env: { PRESENCE_GRACE_MS: '1000' } });

  // The mesh file as a user makes it: `workbench mesh create --out`.
  beforeAll(async () => {
    const made = await runWorkbench(
      ['mesh', 'create', 'mcp-cli', '--members', '2', '--out', meshFile, '--database-url', world.db.url],
      {},
      dir,
    );
    if (made.code !== 0) throw new Error(`mesh create: ${made.code} ${made.stderr}`);
  });

  it('a bad --member or mesh file is exit 2 with what was expected, before connecting; keys the mesh refuses are exit 1', async () => {
    for (const member of ['2', '-1', 'x']) {
      const bad = await runWorkbench([
        'mcp',
        'connect',
        '--mesh',
        meshFile,
        `--member=${member}`,
        '--url',
        world.b.wsUrl,
      ]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain(`--member must be a member's index in ${meshFile}: 0 to 1 (2 members)`);
      expect(bad.stdout).toBe('');
    }
    const missing = await runWorkbench([
      'mcp',
      'host',
      '--mesh',
      join(dir, 'none.json'),
      '--member',
      '0',
      '--',
      'x',
    ]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read the mesh file');
    // Keys that are no member of the mesh: the broker refuses the hello for good, exit 1 with the reason.
    const stranger = join(dir, 'stranger.json');
    const { meshId } = JSON.parse(readFileSync(meshFile, 'utf8')) as { meshId: string };
    writeFileSync(stranger, JSON.stringify({ meshId, name: 'x', members: [generateMemberKeys()] }));
    const refused = await runWorkbench([
      'mcp',
      'connect',
      '--mesh',
      stranger,
      '--member',
      '0',
      '--url',
      world.b.wsUrl,
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('connection refused for good');
    expect(refused.stdout).toBe('');
  });

  it('hosts server-everything with `mcp host`; an SDK client on `mcp connect` lists, calls, and sees the host go', async () => {
    const { host, hostOut } = await startHost(world);
    const { mcp, errors, changes, connectLog } = await connectClient(world);
    try {
      const names = (await mcp.listTools()).tools.map((t) => t.name);
      expect(names).toEqual(
        expect.arrayContaining(['mcp-servers-everything__echo', 'mcp-servers-everything__get-sum']),
      );
      const sum = (await mcp.callTool({
        name: 'mcp-servers-everything__get-sum',
        arguments: { a: 7, b: 35 },
      })) as CallToolResult;
      expect((sum.content[0] as { text: string }).text).toContain('42');

      // The MCP server dies mid-call: the call fails, the host unregisters and exits 1.
      const call = mcp.callTool({
        name: 'mcp-servers-everything__trigger-long-running-operation',
        arguments: { duration: 20, steps: 2 },
      });
      await waitFor(() => descendants(host.pid!).length > 0, { what: 'the MCP server under the host' });
      await pause(300, 'the call reaches the server: nothing outside the host tells when it did');
      for (const pid of descendants(host.pid!)) process.kill(pid, 'SIGKILL');
      const failed = (await call) as CallToolResult;
      expect(failed.isError).toBe(true);
      expect(await within(hostOut.exited, 10_000, 'still running')).toBe(1);
      expect(hostOut.output()).toContain('stopped hosting "mcp-servers-everything": the MCP server exited');
      await waitFor(() => changes.count > 0, { what: 'tools/list_changed after the host went' });
      expect((await mcp.listTools()).tools).toEqual([]);
      // stdout of `mcp connect` carried MCP only (a stray line would be a parse error here); logs on stderr.
      expect(errors).toEqual([]);
      expect(connectLog()).toContain('workbench mcp connect: exposing');
    } finally {
      await mcp.close();
    }
  });
  it('`mcp host` killed (SIGKILL) mid-call: the call ends at once in host_left, and its tools leave the list', async () => {
    const { host } = await startHost(world);
    const { mcp, changes } = await connectClient(world);
    try {
      expect((await mcp.listTools()).tools.length).toBeGreaterThan(0);
      const call = mcp.callTool({
        name: 'mcp-servers-everything__trigger-long-running-operation',
        arguments: { duration: 20, steps: 2 },
      });
      await pause(300, 'the call reaches the host: nothing outside the host tells when it did');
      const server = descendants(host.pid!);
      const exited = new Promise((resolve) => host.once('exit', (code, signal) => resolve(code ?? signal)));
      const killedAt = Date.now();
      host.kill('SIGKILL');
      const failed = (await call) as CallToolResult;
      expect(failed.isError).toBe(true);
      expect((failed.content[0] as { text: string }).text).toMatch(/^mesh: host_left/);
      expect(Date.now() - killedAt).toBeLessThan(5000);
      // The orphaned MCP server is not the bridge's to stop (its parent died with no word); the test stops it.
      for (const pid of server) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      expect(await exited).toBe('SIGKILL');
      // The host's session ends after its grace period: its server leaves the mesh, the client hears of it.
      await waitFor(() => changes.count > 0, {
        timeoutMs: 10_000,
        what: 'list_changed after the host was killed',
      });
      expect((await mcp.listTools()).tools).toEqual([]);
    } finally {
      await mcp.close();
    }
  });
});
