/**
 * A stdio MCP server (the official SDK's low-level Server) shaped to test what `hostMcpServer` registers
 * (tests/integration/mcp-interop.test.ts): 153 tools listed 40 per page, among them one whose name the mesh
 * refuses and one whose input schema alone passes the broker's 60 KiB entry; calling `add-tool` adds a tool
 * `late` at the front and sends `notifications/tools/list_changed`. With `--big`, 20 tools of 2000-character
 * descriptions only (about 40 KiB as listed), so that two such servers make two `mcp.list` pages.
 * Plain JavaScript so that it runs under `node` as a child process, as any MCP server would.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const PAGE = 40;
const big = process.argv.includes('--big');
const tool = (name, extra = {}) => ({ name, inputSchema: { type: 'object' }, ...extra });

const tools = big
  ? Array.from({ length: 20 }, (_, i) => tool(`b${i}`, { description: 'd'.repeat(2000) }))
  : [
      tool('add-tool', { description: 'adds the tool "late" and says the list changed' }),
      tool('bad name!'),
      tool('huge', {
        inputSchema: { type: 'object', properties: { x: { enum: Array(8000).fill('vvvvvvvv') } } },
      }),
      ...Array.from({ length: 150 }, (_, i) => tool(`t${i}`)),
    ];

const server = new Server(
  { name: 'fixture', version: '1.0.0' },
  { capabilities: { tools: { listChanged: true } } },
);
server.setRequestHandler(ListToolsRequestSchema, (request) => {
  const start = Number(request.params?.cursor ?? 0);
  const next = start + PAGE < tools.length ? String(start + PAGE) : undefined;
  return { tools: tools.slice(start, start + PAGE), ...(next ? { nextCursor: next } : {}) };
});
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  if (request.params.name === 'add-tool' && tools[0].name !== 'late') {
    tools.unshift(tool('late'));
    await server.sendToolListChanged();
    return { content: [{ type: 'text', text: 'added' }] };
  }
  return { content: [{ type: 'text', text: `called ${request.params.name}` }] };
});
await server.connect(new StdioServerTransport());
