/**
 * The boundaries of the house, read from the sources: `protocol/` is the one module that both the broker's
 * rows and the peer SDK import. It depends on nothing of the project; the SDK depends on nothing but it; the
 * rows reach the router through its contract (protocol/routes.ts), never through the gateway; and the
 * SDK's browser build reaches no package but the two Node imports its build swaps, and not zod.
 * Imports flow one way (docs/design.md §7): `flags/` imports nothing of broker/, no file imports itself
 * through others, and inside broker/ imports run down the floors but for the listed, explained arrows.
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

  it('imports from the project only broker/, flags/ and protocol/ (never cli/ or client/)', () => {
    expect(
      violations(
        broker,
        (_file, imported) =>
          imported.target !== undefined &&
          !['broker', 'flags', 'protocol'].includes(topFolder(imported.target)!),
      ),
    ).toEqual([]);
  });

  it('keeps no copy of the protocol (no broker/protocol/)', () => {
    expect(broker.filter((file) => file.startsWith('broker/protocol/'))).toEqual([]);
  });
});

/** Every strongly connected group of more than one node in `edges` (Tarjan): the import circles. */
function circles(edges: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (node: string) => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    for (const next of edges.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (stack.includes(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!));
    }
    if (low.get(node) !== index.get(node)) return;
    const group: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      group.push(member);
    } while (member !== node);
    if (group.length > 1) found.push(group.sort());
  };
  for (const node of [...edges.keys()].sort()) if (!index.has(node)) visit(node);
  return found;
}

/** The project files each of `files` imports (type-only and dynamic imports included). */
function fileEdges(files: string[]): Map<string, Set<string>> {
  const known = new Set(files);
  return new Map(
    files.map((file) => [
      file,
      new Set(
        importsOf(file)
          .map((imported) => imported.target)
          .filter((target): target is string => target !== undefined && known.has(target)),
      ),
    ]),
  );
}

describe('the flags module', () => {
  it('imports from the project nothing but flags/ (the root hands it db, audit, Redis and paths)', () => {
    expect(
      violations(
        sources('flags'),
        (_file, imported) => imported.target !== undefined && topFolder(imported.target) !== 'flags',
      ),
    ).toEqual([]);
  });
});

describe('imports across the house', () => {
  it('form no file circles in broker/, flags/, protocol/, client/ or cli/, type-only imports included', () => {
    const files = ['broker', 'flags', 'protocol', 'client', 'cli'].flatMap(sources);
    expect(files.length).toBeGreaterThan(200);
    expect(circles(fileEdges(files))).toEqual([]);
  });
});

/**
 * The floors of broker/, lowest first (docs/design.md §7): a folder (or a file of broker/'s own) imports
 * its own floor and the ones below. Every folder and root file of broker/ is on exactly one floor, so a
 * new one has to be placed here.
 */
const FLOORS: Array<{ floor: string; units: string[] }> = [
  {
    floor: 'infrastructure',
    units: [
      'db',
      'redis',
      'bus',
      'log',
      'metrics',
      'build-info',
      'config',
      'paths',
      'timing',
      'secrets',
      'plants',
    ],
  },
  { floor: 'shared services', units: ['connections', 'identity', 'hello', 'membership', 'paging'] },
  { floor: 'row framework', units: ['rows', 'shadow'] },
  {
    floor: 'rows',
    units: [
      'audit',
      'clock',
      'connection-cap',
      'delivery',
      'lease',
      'mcp',
      'presence',
      'rate-limits',
      'regions',
      'schedules',
      'streams',
      'watches',
    ],
  },
  { floor: 'inventory', units: ['modules'] },
  { floor: 'edges', units: ['ws', 'http', 'flag-runtime', 'flag-provider', 'flag-changes', 'flag-refresh'] },
  { floor: 'node', units: ['node'] },
  { floor: 'composition root', units: ['app'] },
];

/**
 * The arrows that run back up a floor, each explained in docs/design.md §7.1. None is left: the five the
 * root's hand wiring made (row stores and sink types in rows/context.ts) went with rows that register
 * themselves (issue 29) and the sinks' frame types declared beside the sinks. A new one must be listed here
 * with its reason, and explained in docs/design.md.
 */
const BACK_ARROWS: Record<string, string> = {};

/** The folder of broker/ a file is in, or the name of broker/'s own file (`broker/app.ts` → `app`). */
const unitOf = (file: string) => file.split('/')[1]!.replace(/\.ts$/, '');

describe('the floors of broker/', () => {
  const broker = sources('broker');
  const floorOf = new Map(FLOORS.flatMap(({ units }, level) => units.map((unit) => [unit, level] as const)));
  /** `from -> to` for every import of one broker/ unit by another, with the files that make it. */
  const unitArrows = new Map<string, string[]>();
  for (const [file, targets] of fileEdges(broker)) {
    for (const target of targets) {
      if (unitOf(file) === unitOf(target)) continue;
      const arrow = `${unitOf(file)} -> ${unitOf(target)}`;
      unitArrows.set(arrow, [...(unitArrows.get(arrow) ?? []), `${file} imports ${target}`]);
    }
  }
  const runsUp = (arrow: string) => {
    const [from, to] = arrow.split(' -> ') as [string, string];
    return floorOf.get(to)! > floorOf.get(from)!;
  };

  it('place every folder and root file of broker/ on one floor', () => {
    const units = [...new Set(broker.map(unitOf))].sort();
    expect(units.filter((unit) => !floorOf.has(unit))).toEqual([]);
    expect([...floorOf.keys()].filter((unit) => !units.includes(unit))).toEqual([]);
    expect(floorOf.size).toBe(FLOORS.flatMap(({ units }) => units).length); // no unit on two floors
  });

  it('import downwards, but for the listed arrows back up (each explained in docs/design.md §7)', () => {
    const up = [...unitArrows.keys()].filter(runsUp).sort();
    expect(
      up
        .filter((arrow) => !(arrow in BACK_ARROWS))
        .map((arrow) => `${arrow}: ${unitArrows.get(arrow)!.join(', ')}`),
    ).toEqual([]);
    expect(up).toEqual(Object.keys(BACK_ARROWS).sort()); // a listed arrow that is gone is struck off the list
    // Every listed arrow is made by the hand wiring in rows/context.ts alone.
    for (const arrow of up) {
      expect(unitArrows.get(arrow)!.every((line) => line.startsWith('broker/rows/context.ts '))).toBe(true);
    }
  });

  it('close no folder loop but through a listed arrow back up', () => {
    const folders = new Map<string, Set<string>>();
    for (const arrow of unitArrows.keys()) {
      if (arrow in BACK_ARROWS) continue;
      const [from, to] = arrow.split(' -> ') as [string, string];
      folders.set(from, (folders.get(from) ?? new Set()).add(to));
    }
    expect(circles(folders)).toEqual([]);
  });
});
