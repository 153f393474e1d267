/**
 * Size bounds of the broker's code (issue 29): the composition root (`broker/app.ts`) and the ordered list
 * of rows (`broker/modules.ts`) stay small, and no function in `broker/` (declarations, methods,
 * constructors, accessors, function expressions and arrow functions, nested ones counted on their own
 * too) runs over 80 lines, so that each one can be read at once. Lines are counted from the TypeScript
 * compiler's own parse, from a function's first line to its last.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';

const ROOT = packageRoot();
const MAX_FUNCTION_LINES = 80;
const MAX_FILE_LINES: Record<string, number> = { 'broker/app.ts': 150, 'broker/modules.ts': 150 };

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
  });
}

const rel = (path: string) => relative(ROOT, path).split(sep).join('/');

/** `file:line name (N lines)` for every function of a file longer than the bound. */
function longFunctions(path: string): string[] {
  const text = readFileSync(path, 'utf8');
  const file = ts.createSourceFile(path, text, ts.ScriptTarget.ES2022, true);
  const found: string[] = [];
  const lineOf = (position: number) => file.getLineAndCharacterOfPosition(position).line + 1;
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = lineOf(node.getStart(file));
      const lines = lineOf(node.getEnd()) - first + 1;
      const name = node.name?.getText(file) ?? ts.SyntaxKind[node.kind];
      if (lines > MAX_FUNCTION_LINES) found.push(`${rel(path)}:${first} ${name} (${lines} lines)`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe('the size of the broker code', () => {
  it(`has no function over ${MAX_FUNCTION_LINES} lines`, () => {
    expect(sources(join(ROOT, 'broker')).flatMap(longFunctions)).toEqual([]);
  });

  it('keeps the composition root and the ordered list of rows small', () => {
    for (const [file, max] of Object.entries(MAX_FILE_LINES)) {
      const lines = readFileSync(join(ROOT, file), 'utf8').trimEnd().split('\n').length;
      expect(lines, `${file} has ${lines} lines`).toBeLessThanOrEqual(max);
    }
  });
});
