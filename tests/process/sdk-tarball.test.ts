/**
 * @mesh-broker/sdk as a user gets it (issue 28 item 3): `npm pack` of a clean copy of the repository (its
 * tracked and unignored files, so no client/dist: the package's `prepack` must build it), the tarball
 * installed with `npm install <tgz>` into an empty folder outside the repository, and from there the Node
 * example (examples/node-peer, copied in) and the browser example (examples/browser-peer, served from the
 * installed package and opened in Chromium) exchanging messages through a real broker. The tarball's file
 * list is checked (the build, LICENSE, README, CHANGELOG; no sources, no tests), and so are its `exports`
 * types, by tiny TypeScript consumers compiled against the installed package with `moduleResolution`
 * `nodenext` (Node) and `bundler` with the `browser` condition (a bundled web app); a web app bundled by
 * vite from the install must get the browser build (no `ws`, no node:crypto).
 *
 * npm runs here: the copy's build (tsc, vite) and the install take tens of seconds on two shared cores.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import type { TestNode } from '../helpers/broker.js';
import { captured } from '../helpers/cli.js';
import { createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { type Finished, runToEnd } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = packageRoot();
const NPM_TIMEOUT_MS = 240_000;

let work: string;
let tarball: string;
let packed: string[];
let app: string;
let db: TestDatabase | undefined;
let node: TestNode | undefined;
let mesh: TestMesh;
let browser: Browser | undefined;
let server: ChildProcess | undefined;

/**
 * The environment for npm: this one without the npm_* variables an enclosing `npm test` sets (its
 * workspace, package and prefix must not steer the pack or the install), but with its cache and registry.
 */
function npmEnv(): NodeJS.ProcessEnv {
  const kept = /^npm_config_(cache|registry|userconfig)$/i;
  return Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !/^npm_/i.test(name) || kept.test(name)),
  );
}

async function npm(args: string[], cwd: string): Promise<Finished> {
  return runToEnd('npm', args, { cwd, env: npmEnv(), timeoutMs: NPM_TIMEOUT_MS });
}

/** The repository as a fresh clone has it (tracked and unignored files: no dist/, no node_modules/). */
function cleanCopy(to: string): void {
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  for (const file of files.split('\0').filter(Boolean)) {
    mkdirSync(dirname(join(to, file)), { recursive: true });
    try {
      cpSync(join(ROOT, file), join(to, file));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error; // deleted, not yet committed
    }
  }
  // The build's tools (tsc, vite) and types, as `npm ci` would install them; not the build itself.
  symlinkSync(join(ROOT, 'node_modules'), join(to, 'node_modules'));
}

/** `npm pack` of the clean copy's SDK: the tarball's path and the files npm says it holds. */
async function packSdk(): Promise<void> {
  const source = join(work, 'source');
  cleanCopy(source);
  const run = await npm(['pack', '--json', '--pack-destination', work], join(source, 'client'));
  if (run.code !== 0) throw new Error(`npm pack failed (${run.code}):\n${run.stderr}`);
  const [report] = JSON.parse(run.stdout.slice(run.stdout.search(/^\[/m))) as [
    { filename: string; files: { path: string }[] },
  ];
  tarball = join(work, report.filename);
  packed = report.files.map((file) => file.path).sort();
}

/**
 * The examples copied into an empty folder (node-peer's package.json and peer.js at its top, browser-peer/
 * beside them) and the tarball installed there. Offline first: the dependencies' tarballs are in npm's
 * cache from the repository's install; a cache without their metadata (a fresh machine) asks the registry.
 */
async function installExamples(): Promise<void> {
  app = join(work, 'app');
  cpSync(join(ROOT, 'examples', 'node-peer'), app, { recursive: true });
  cpSync(join(ROOT, 'examples', 'browser-peer'), join(app, 'browser-peer'), { recursive: true });
  const flags = ['--no-audit', '--no-fund'];
  let run = await npm(['install', '--offline', ...flags, tarball], app);
  if (run.code !== 0 && run.stderr.includes('ENOTCACHED'))
    run = await npm(['install', '--prefer-offline', ...flags, tarball], app);
  if (run.code !== 0) throw new Error(`npm install of the tarball failed (${run.code}):\n${run.stderr}`);
}

/** `node peer.js ARGS` of the copied Node example, to its end. */
function runNodePeer(args: string[]): Promise<Finished> {
  return runToEnd(process.execPath, [join(app, 'peer.js'), ...args], { cwd: app, timeoutMs: 60_000 });
}

/** The copied browser-peer/serve.js on a free port; resolves with the URL it prints. */
async function serveBrowserPeer(): Promise<string> {
  server = spawn(process.execPath, [join(app, 'browser-peer', 'serve.js'), '--port', '0'], {
    cwd: app,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const { output, exited } = captured(server);
  let code: number | string | null | undefined;
  void exited.then((value) => {
    code = value;
  });
  return waitFor(
    () => {
      if (code !== undefined) throw new Error(`serve.js exited (${code}):\n${output()}`);
      return output().match(/browser peer: (http:\/\/127\.0\.0\.1:\d+\/)/)?.[1];
    },
    { what: 'serve.js to print its URL' },
  );
}

/** Where `specifier` resolves from the app folder, as a plain Node process there sees it. */
function resolvedFromApp(specifier: string): string {
  const script = `console.log(new URL(import.meta.resolve(${JSON.stringify(specifier)})).pathname)`;
  return execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: app,
    encoding: 'utf8',
  }).trim();
}

/**
 * `tsc` (the repository's TypeScript) on one consumer, `ts/NAME.ts` of the app folder, with
 * `compilerOptions`; each has its own tsconfig file, so consumers compile side by side.
 */
function compile(name: string, compilerOptions: object, source: string[]): Promise<Finished> {
  const dir = join(app, 'ts');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${name}.ts`), `${source.join('\n')}\n`);
  const config = join(dir, `tsconfig.${name}.json`);
  writeFileSync(config, JSON.stringify({ compilerOptions, files: [`${name}.ts`] }));
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  return runToEnd(process.execPath, [tsc, '-p', config], { cwd: dir, timeoutMs: 170_000 });
}

interface PackageManifest {
  license: string;
  main: string;
  types: string;
  exports: Record<string, unknown>;
}

/** The package files `conditions` (an `exports` value, nested) points at, without the leading `./`. */
function entryPoints(conditions: unknown): string[] {
  if (typeof conditions === 'string') return [conditions.replace(/^\.\//, '')];
  if (typeof conditions !== 'object' || conditions === null) return [];
  return Object.entries(conditions)
    .filter(([name]) => name !== '@mesh-broker/source')
    .flatMap(([, value]) => entryPoints(value));
}

const lines = (stdout: string) =>
  stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'sdk-tarball-'));
  await packSdk();
  await installExamples();
  db = await createTestDatabase('sdk_tarball');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url, env: { NODE_ID: 'tarball' } });
  mesh = await createMesh(node, 2);
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}, 2 * NPM_TIMEOUT_MS);
afterAll(async () => {
  await browser?.close();
  server?.kill();
  await node?.stop();
  await db?.drop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the SDK tarball', () => {
  it('holds the build, LICENSE, README and CHANGELOG, and no sources or tests', () => {
    expect(packed).toEqual(expect.arrayContaining(['CHANGELOG.md', 'LICENSE', 'README.md', 'package.json']));
    const unexpected = packed.filter(
      (path) =>
        !/^(CHANGELOG\.md|LICENSE|README\.md|package\.json)$/.test(path) &&
        !/^dist\/.+\.(js|js\.map|d\.ts)$/.test(path),
    );
    expect(unexpected).toEqual([]);
    expect(packed.filter((path) => /(^|\/)tests?\/|\.test\./.test(path))).toEqual([]);
    // Every file its `main`, `types` and `exports` name is there (prepack built them in the clean copy),
    // but the repository's own source condition (TypeScript sources, for its type check and tests).
    const manifest = JSON.parse(
      readFileSync(join(ROOT, 'client', 'package.json'), 'utf8'),
    ) as PackageManifest;
    const entries = entryPoints({ main: manifest.main, types: manifest.types, exports: manifest.exports });
    expect(entries).toEqual(expect.arrayContaining(['dist/client/index.d.ts', 'dist/browser/mesh-sdk.js']));
    expect(entries.filter((path) => !packed.includes(path))).toEqual([]);
    const installed = join(app, 'node_modules', '@mesh-broker', 'sdk');
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toBe(
      readFileSync(join(ROOT, 'LICENSE'), 'utf8'),
    );
    const shipped = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as PackageManifest;
    expect(shipped.license).toBe('Apache-2.0');
    // No .ts is shipped, so each source map carries its sources (a peer debugging the SDK sees them).
    const withoutSources = packed.filter((path) => {
      if (!path.endsWith('.map')) return false;
      const map = JSON.parse(readFileSync(join(installed, path), 'utf8')) as {
        sources: string[];
        sourcesContent?: string[];
      };
      return map.sourcesContent?.length !== map.sources.length;
    });
    expect(withoutSources).toEqual([]);
  });

  it('installs outside the repository: the examples resolve the installed package, not the workspace', () => {
    const installed = join(app, 'node_modules', '@mesh-broker', 'sdk');
    expect(resolvedFromApp('@mesh-broker/sdk')).toBe(join(installed, 'dist', 'client', 'index.js'));
    expect(resolvedFromApp('@mesh-broker/sdk/browser')).toBe(
      join(installed, 'dist', 'browser', 'mesh-sdk.js'),
    );
    const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    expect(manifest.dependencies['@mesh-broker/sdk']).toMatch(/^file:.*mesh-broker-sdk-[\d.]+\.tgz$/);
  });

  it('the Node example and the browser example, run from the install, exchange messages through a broker', async () => {
    const [nodeMember, browserMember] = mesh.members as [TestMesh['members'][0], TestMesh['members'][0]];
    const pageUrl = new URL(await serveBrowserPeer());
    const query = {
      url: node!.wsUrl,
      meshId: mesh.meshId,
      pubkey: browserMember.pubkey,
      secretKey: browserMember.secretKey,
      to: nodeMember.pubkey,
      message: 'hello from the browser',
    };
    for (const [name, value] of Object.entries(query)) pageUrl.searchParams.set(name, value);
    const page = await browser!.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));

    const nodePeer = runNodePeer([
      ...['--url', node!.wsUrl, '--mesh', mesh.meshId],
      ...['--pubkey', nodeMember.pubkey, '--secret-key', nodeMember.secretKey],
      ...['--to', browserMember.pubkey, '--message', 'hello from node', '--wait-ms', '30000'],
    ]);
    await page.goto(pageUrl.href);
    await page.getByTestId('status').filter({ hasText: 'connected' }).waitFor({ timeout: 20_000 });
    const received = page.locator('[data-testid="messages"] li');
    await received.first().waitFor({ timeout: 20_000 });
    expect(await received.first().getAttribute('data-body')).toBe('hello from node');
    expect(await received.first().getAttribute('data-from')).toBe(nodeMember.pubkey);

    const run = await nodePeer;
    expect(run.code, run.stderr).toBe(0);
    const messages = lines(run.stdout).filter((event) => event.event === 'message');
    expect(messages).toEqual([
      expect.objectContaining({ from: browserMember.pubkey, body: 'hello from the browser' }),
    ]);
    expect(await received.count()).toBe(1);
    expect(pageErrors).toEqual([]);

    // The page's SDK is the installed package's browser build, byte for byte.
    const served = await (await fetch(new URL('/sdk/mesh-sdk.js', pageUrl))).text();
    const bundle = join(app, 'node_modules', '@mesh-broker', 'sdk', 'dist', 'browser', 'mesh-sdk.js');
    expect(served).toBe(readFileSync(bundle, 'utf8'));
    await page.close();
  }, 90_000);

  it('its types resolve for Node (nodenext) and for browsers (bundler, browser condition)', async () => {
    const strict = { strict: true, noEmit: true, target: 'es2022' };
    const [nodeRun, browserRun] = await Promise.all([
      // Node: the Node build's declarations (checked too: skipLibCheck off), with generateMemberKeys; the
      // /browser subpath has the same client.
      compile(
        'node',
        {
          ...strict,
          skipLibCheck: false,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules', '@types')],
        },
        [
          "import { generateMemberKeys, MeshClient, MeshClosedError, type Message } from '@mesh-broker/sdk';",
          "import type { MeshClient as PageClient } from '@mesh-broker/sdk/browser';",
          "const peer = new MeshClient({ urls: ['ws://127.0.0.1:1/ws'], meshId: 'm', keys: generateMemberKeys() });",
          "peer.on('message', (message: Message) => console.log(message.from, message.body));",
          'const page: PageClient = peer;',
          'export const checks = [page, MeshClosedError];',
        ],
      ),
      // A bundled web app: the browser declarations, which have no generateMemberKeys (the @ts-expect-error
      // fails the compile if the Node declarations were picked instead). skipLibCheck on, as web app
      // templates set it (the browser declarations still name node:crypto through keys.d.ts).
      compile(
        'browser',
        {
          ...strict,
          skipLibCheck: true,
          module: 'esnext',
          moduleResolution: 'bundler',
          customConditions: ['browser'],
          lib: ['es2022', 'dom'],
          types: [],
        },
        [
          "import { MeshClient, signHello, type Welcome } from '@mesh-broker/sdk';",
          '// @ts-expect-error: the browser build has no Node key generation',
          "import { generateMemberKeys } from '@mesh-broker/sdk';",
          "const peer = new MeshClient({ urls: ['ws://127.0.0.1:1/ws'], meshId: 'm', keys: { pubkey: 'a', secretKey: 'b' } });",
          "peer.on('welcome', (welcome: Welcome) => console.log(welcome.node));",
          'export const checks = [signHello, generateMemberKeys];',
        ],
      ),
    ]);
    expect(nodeRun.code, nodeRun.stdout + nodeRun.stderr).toBe(0);
    expect(browserRun.code, browserRun.stdout + browserRun.stderr).toBe(0);
  }, 180_000);

  it('a bundler (vite) building a web app from the install takes the browser build, with no Node module', async () => {
    const web = join(app, 'web');
    mkdirSync(web, { recursive: true });
    writeFileSync(
      join(web, 'index.html'),
      '<!doctype html><script type="module" src="./main.js"></script>\n',
    );
    writeFileSync(
      join(web, 'main.js'),
      "import { MeshClient } from '@mesh-broker/sdk';\nglobalThis.MeshClient = MeshClient;\n",
    );
    const vite = join(ROOT, 'node_modules', 'vite', 'bin', 'vite.js');
    const out = join(app, 'web-dist');
    const args = [
      vite,
      'build',
      web,
      '--outDir',
      out,
      '--emptyOutDir',
      '--minify',
      'false',
      '--logLevel',
      'warn',
    ];
    const run = await runToEnd(process.execPath, args, { cwd: app, timeoutMs: 120_000 });
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const assets = join(out, 'assets');
    const bundle = readdirSync(assets)
      .filter((name) => name.endsWith('.js'))
      .map((name) => readFileSync(join(assets, name), 'utf8'))
      .join('\n');
    // The browser build's stand-in for `ws` is in; neither `ws` (its browser file only throws) nor node:crypto.
    expect(bundle).toMatch(/BrowserWebSocket = class extends WebSocket/);
    expect(bundle).not.toContain('ws does not work in the browser');
    expect(bundle).not.toMatch(/node:crypto|from ["']ws["']/);
    expect(run.stderr).not.toMatch(/externalized for browser compatibility/);
  }, 120_000);
});
