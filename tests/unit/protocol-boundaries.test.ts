/**
 * The protocol boundary, read from the sources: `protocol/` is the one module that both the broker's rows
 * and the peer SDK import. It depends on nothing of the project; the SDK depends on nothing but it; the
 * rows reach the router through its contract (protocol/routes.ts), never through the gateway; and the
 * SDK's browser build reaches no package but the two Node imports its build swaps, and not zod.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';

const ROOT = packageRoot();

/** Every .ts source under a top-level folder, as paths relative to the package root ('/'-separated). */
function sources(folder: string): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) found.push(rel(path));
    }
  };
  walk(join(ROOT, folder));
  return found.sort();
}

const rel = (path: string) => relative(ROOT, path).split(sep).join('/');

interface Import {
  specifier: string;
  /** The project file it names (relative to the root, `.ts`), or undefined for a package. */
  target: string | undefined;
}

function resolveImport(file: string, specifier: string): Import {
  if (!specifier.startsWith('.')) return { specifier, target: undefined };
  const target = rel(resolve(ROOT, dirname(file), specifier)).replace(/\.js$/, '.ts');
  return { specifier, target };
}

/** Every import of a file, type-only ones included (`import`, `import type`, `export … from`, `import()`). */
function importsOf(file: string): Import[] {
  const info = ts.preProcessFile(readFileSync(join(ROOT, file), 'utf8'), true, true);
  return info.importedFiles.map((entry) => resolveImport(file, entry.fileName));
}

/** The imports left in the compiled JavaScript of a file: what a browser actually loads. */
function valueImportsOf(file: string): Import[] {
  const { outputText } = ts.transpileModule(readFileSync(join(ROOT, file), 'utf8'), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  return ts
    .preProcessFile(outputText, true, true)
    .importedFiles.map((entry) => resolveImport(file, entry.fileName));
}

const topFolder = (path: string) => path.split('/')[0];

/** `file imports specifier` lines for every import that `bad` flags, for a readable failure. */
function violations(files: string[], bad: (file: string, imported: Import) => boolean): string[] {
  return files.flatMap((file) =>
    importsOf(file)
      .filter((imported) => bad(file, imported))
      .map((imported) => `${file} imports ${imported.specifier}`),
  );
}

describe('the protocol module', () => {
  const protocol = sources('protocol');

  it('holds the wire types, codes, hello bytes and router contract', () => {
    for (const file of ['errors', 'frames', 'hello-message', 'parse', 'requests', 'routes']) {
      expect(protocol).toContain(`protocol/${file}.ts`);
    }
  });

  it('imports nothing of the project outside protocol/, and no package but zod', () => {
    expect(
      violations(protocol, (_file, imported) =>
        imported.target === undefined
          ? imported.specifier !== 'zod'
          : topFolder(imported.target) !== 'protocol',
      ),
    ).toEqual([]);
  });
});

describe('the peer SDK', () => {
  const client = sources('client');

  it('imports from the project only client/ and protocol/ (never broker/ or cli/)', () => {
    expect(
      violations(
        client,
        (_file, imported) =>
          imported.target !== undefined && !['client', 'protocol'].includes(topFolder(imported.target)!),
      ),
    ).toEqual([]);
  });

  it('in a browser reaches no package but the two its build swaps (ws, node:crypto), and no zod', () => {
    // client/vite.browser.config.ts swaps `ws` and `node:crypto` for browser stand-ins and keys.js for
    // keys.webcrypto.ts; anything else the browser entry reached by value would end up in (or be missing
    // from) dist/browser/mesh-sdk.js, the one module a page loads.
    const reached = new Set<string>();
    const packages = new Set<string>();
    const visit = (file: string) => {
      const mapped = file === 'client/keys.ts' ? 'client/keys.webcrypto.ts' : file;
      if (reached.has(mapped)) return;
      reached.add(mapped);
      for (const imported of valueImportsOf(mapped)) {
        if (imported.target === undefined) packages.add(imported.specifier);
        else visit(imported.target);
      }
    };
    visit('client/index.browser.ts');
    expect([...packages].sort()).toEqual(['node:crypto', 'ws']);
    expect(
      [...reached].filter((file) => !file.startsWith('client/') && !file.startsWith('protocol/')),
    ).toEqual([]);
    expect(reached.has('protocol/frames.ts')).toBe(false); // type-only: zod stays out of the browser
  });
});

describe('the broker', () => {
  const broker = sources('broker');
  /** The files that register request frames: each row's frames.ts, and durable messaging's. */
  const registering = broker.filter(
    (file) => /^broker\/[^/]+\/frames\.ts$/.test(file) || file === 'broker/delivery/messaging.ts',
  );

  it("rows register their frames through protocol/'s router contract, never importing broker/ws/", () => {
    expect(registering.length).toBeGreaterThanOrEqual(8);
    expect(
      violations(registering, (_file, imported) => imported.target?.startsWith('broker/ws/') === true),
    ).toEqual([]);
    for (const file of registering) {
      expect(importsOf(file).map((imported) => imported.target)).toContain('protocol/routes.ts');
    }
  });

  it('keeps no copy of the protocol (no broker/protocol/)', () => {
    expect(broker.filter((file) => file.startsWith('broker/protocol/'))).toEqual([]);
  });
});
