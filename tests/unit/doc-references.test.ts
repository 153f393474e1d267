import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

/** The project carries its own specs: every reference in code and docs points at something that exists. */
const ROOT = join(import.meta.dirname, '..', '..');
const SKIP = new Set(['node_modules', 'dist', '.git', 'test-results', 'test-artifacts', '.workbench']);

function files(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (SKIP.has(name)) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) files(path, out);
    else if (/\.(ts|md|yml|json|cjs)$/.test(name)) out.push(path);
  }
  return out;
}

const sources = files(ROOT).map((path) => ({ path: relative(ROOT, path), text: readFileSync(path, 'utf8') }));
const headings = (doc: string) =>
  readFileSync(join(ROOT, doc), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('#'))
    .map((line) => line.replace(/^#+\s*/, '').trim());

describe('references in code and docs', () => {
  it('name only docs/*.md files that exist', () => {
    const missing: string[] = [];
    for (const { path, text } of sources) {
      for (const match of text.matchAll(/\bdocs\/([\w./-]+\.md)/g)) {
        if (!existsSync(join(ROOT, 'docs', match[1]!))) missing.push(`${path}: docs/${match[1]}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('name sections of docs/design.md and docs/protocol.md that exist', () => {
    const design = headings('docs/design.md');
    const protocol = headings('docs/protocol.md');
    const missing: string[] = [];
    for (const { path, text } of sources) {
      for (const match of text.matchAll(/docs\/design\.md §(\d+(?:\.\d+)?)/g)) {
        if (!design.some((h) => h.startsWith(`${match[1]}.`) || h.startsWith(`${match[1]} `)))
          missing.push(`${path}: design §${match[1]}`);
      }
      for (const match of text.matchAll(/docs\/protocol\.md § ([A-Z][\w ]*[\w])/g)) {
        if (!protocol.some((h) => match[1]!.startsWith(h))) missing.push(`${path}: protocol § ${match[1]}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('no longer point at the brief outside the repository', () => {
    const stale = sources
      .filter(({ path }) => path !== 'tests/unit/doc-references.test.ts')
      .filter(({ text }) => /\bDESIGN(\.md)? §|\bPROTOCOL\.md\b|\.\.\/shared\//.test(text))
      .map(({ path }) => path);
    expect(stale).toEqual([]);
  });
});
