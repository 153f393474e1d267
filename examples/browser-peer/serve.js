// Serves the browser peer (index.html, peer.js) and the SDK's browser build at /sdk/mesh-sdk.js, on
// 127.0.0.1. The build's file is found through the package (`@mesh-broker/sdk/browser`), as any app that
// serves it would; `npm run build` (or `npm run build -w @mesh-broker/sdk`) makes it.
//
//   node serve.js [--port N]      prints "browser peer: http://127.0.0.1:N/" once listening
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { port: { type: 'string', default: '8090' } } });
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`serve: --port must be a port number (0 for any free one), not ${values.port}`);
  process.exit(2);
}

const sdk = fileURLToPath(import.meta.resolve('@mesh-broker/sdk/browser'));
const here = (name) => fileURLToPath(new URL(name, import.meta.url));
// A fixed list: no path from a URL reaches the file system.
const FILES = {
  '/': { path: here('index.html'), type: 'text/html' },
  '/peer.js': { path: here('peer.js'), type: 'text/javascript' },
  '/sdk/mesh-sdk.js': { path: sdk, type: 'text/javascript' },
  '/sdk/mesh-sdk.js.map': { path: `${sdk}.map`, type: 'application/json' },
};

const server = createServer(async (request, response) => {
  const file = FILES[new URL(request.url ?? '/', 'http://localhost').pathname];
  if (request.method !== 'GET' || !file) {
    response.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    return;
  }
  try {
    const body = await readFile(file.path);
    response.writeHead(200, { 'content-type': `${file.type}; charset=utf-8`, 'cache-control': 'no-store' });
    response.end(body);
  } catch (error) {
    response.writeHead(500, { 'content-type': 'text/plain' }).end(`cannot read ${file.path}: ${error.code}`);
  }
});
server.listen(port, '127.0.0.1', () => {
  console.log(`browser peer: http://127.0.0.1:${server.address().port}/`);
});
