/**
 * The SDK's browser build: index.browser.ts and what it imports, bundled into one ES module
 * (dist/browser/mesh-sdk.js) that a page loads with `<script type="module">` and no import map. The four
 * Node imports of client.ts are swapped here, at build time, for browser stand-ins, so client.ts itself is
 * one source for both builds: `ws` → the browser's WebSocket, `node:crypto` → crypto.randomUUID,
 * `./keys.js` (node:crypto ed25519) → keys.webcrypto.ts (WebCrypto Ed25519, the same signatures), and
 * `./socket.js` (the cookie jar) → browser/socket.js (the browser keeps cookies itself).
 */
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  root: here('.'),
  publicDir: false,
  resolve: {
    alias: [
      { find: /^ws$/, replacement: here('./browser/ws.js') },
      { find: /^node:crypto$/, replacement: here('./browser/node-crypto.js') },
      { find: /^\.\/keys\.js$/, replacement: here('./keys.webcrypto.ts') },
      { find: /^\.\/socket\.js$/, replacement: here('./browser/socket.js') },
    ],
  },
  build: {
    outDir: here('./dist/browser'),
    emptyOutDir: true,
    target: 'es2022',
    // Readable, with a source map: peers debug the SDK in their browser's developer tools.
    minify: false,
    sourcemap: true,
    lib: { entry: here('./index.browser.ts'), formats: ['es'], fileName: () => 'mesh-sdk.js' },
  },
});
