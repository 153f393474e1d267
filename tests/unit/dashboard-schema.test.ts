/**
 * dashboards/mesh-broker.json type-checked against @grafana/schema's `Dashboard`: the JSON is written into
 * a TypeScript source as an object literal assigned to the checked type, and the TypeScript compiler
 * checks it (an object literal, unlike an imported JSON module, gets excess-property checks: an unknown
 * panel property fails, not only a wrong type). The checked type is `Dashboard` as JSON spells it (string
 * enums as their string values) with two additions, both below: the schema's one known gap, `definition`
 * on query variables, and the annotation queries' shapes, which the schema leaves to each datasource
 * plugin (`AnnotationQuery<TQuery>`). Mutated copies show that the check fails where the types are strict.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';

const root = packageRoot();
const dashboardPath = join(root, 'dashboards', 'mesh-broker.json');
/** Where the generated source pretends to live: inside the project, so `@grafana/schema` resolves. */
const checkedFile = join(root, 'dashboards', '__mesh-broker.dashboard-check.ts');

const CHECKED_TYPE = `
import type { AnnotationQuery, Dashboard, VariableModel } from '@grafana/schema';

/** A type as JSON spells it: a string enum member is its string value (JSON has no enums). */
type Json<T> = T extends string
  ? \`\${T}\`
  : T extends readonly (infer E)[]
    ? Json<E>[]
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

/**
 * The known gap: Grafana writes \`definition\` (the query's text) on query variables, the schema does not
 * declare it. Allowed there and nowhere else.
 */
type Variable =
  | (Json<Omit<VariableModel, 'type'>> & { type: 'query'; definition?: string })
  | (Json<Omit<VariableModel, 'type'>> & { type: Exclude<Json<VariableModel['type']>, 'query'> });

/** Annotation queries of the two datasource plugins the dashboard uses (their packages are not installed). */
interface SqlAnnotationQuery {
  refId: string;
  editorMode: 'code' | 'builder';
  format: 'table' | 'time_series';
  rawQuery: boolean;
  rawSql: string;
}
interface PrometheusAnnotationQuery {
  refId: string;
  expr: string;
  interval?: string;
  titleFormat?: string;
  textFormat?: string;
  tagKeys?: string;
  useValueForTime?: boolean;
}

type Checked = Omit<Json<Dashboard>, 'templating' | 'annotations'> & {
  templating?: { list?: Variable[] };
  annotations?: { list?: Json<AnnotationQuery<SqlAnnotationQuery | PrometheusAnnotationQuery>>[] };
};
`;

/** The schema's and the libraries' parsed files, shared by every check (parsing them is most of the time). */
const parsed = new Map<string, ts.SourceFile | undefined>();

/** The TypeScript errors of `dashboard` assigned to the checked type, each with the line it points at. */
function typeErrors(dashboard: unknown): string[] {
  return compileErrors(
    `${CHECKED_TYPE}\nexport const dashboard: Checked = ${JSON.stringify(dashboard, null, 2)};\n`,
  );
}

function compileErrors(source: string): string[] {
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  // The generated source exists only in memory; everything else (the schema's .d.ts files) from disk.
  host.fileExists = (file) => file === checkedFile || fileExists.call(host, file);
  host.readFile = (file) => (file === checkedFile ? source : readFile.call(host, file));
  host.getSourceFile = (file, language, ...rest) =>
    file === checkedFile
      ? ts.createSourceFile(file, source, language)
      : (parsed.get(file) ?? parsed.set(file, getSourceFile.call(host, file, language, ...rest)).get(file));
  const program = ts.createProgram([checkedFile], options, host);
  const lines = source.split('\n');
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    if (d.file?.fileName !== checkedFile || d.start === undefined) return message;
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    return `${message}\n  at: ${lines[line]?.trim()}`;
  });
}

type Json = Record<string, unknown>;
const shipped = () => JSON.parse(readFileSync(dashboardPath, 'utf8')) as Json & { panels: Json[] };
const firstOfType = (dashboard: { panels: Json[] }, type: string) =>
  dashboard.panels.find((p) => p.type === type) as Json;

describe('dashboards/mesh-broker.json against @grafana/schema', () => {
  it('type-checks as a Dashboard', () => {
    expect(typeErrors(shipped())).toEqual([]);
  }, 60_000);

  it('names no datasource uid: every panel, target, variable and annotation goes through a variable', () => {
    const dashboard = shipped() as Json & {
      panels: Array<{
        type: string;
        title: string;
        datasource?: unknown;
        targets?: Array<{ datasource?: unknown }>;
      }>;
      templating: { list: Array<{ name: string; type: string; datasource?: unknown; query?: unknown }> };
      annotations: { list: Array<{ name: string; builtIn?: number; datasource: unknown }> };
    };
    // Grafana's variable syntax, not a template string.
    const variable = (name: string) => `\${${name}}`;
    const prometheus = { type: 'prometheus', uid: variable('datasource') };
    const variables = dashboard.templating.list.filter((v) => v.type === 'datasource');
    expect(variables.map((v) => [v.name, v.query])).toEqual([
      ['datasource', 'prometheus'],
      ['postgres', 'grafana-postgresql-datasource'],
    ]);
    for (const panel of dashboard.panels.filter((p) => p.type !== 'row')) {
      expect(panel.datasource, panel.title).toEqual(prometheus);
      for (const target of panel.targets ?? []) expect(target.datasource, panel.title).toEqual(prometheus);
    }
    for (const variable of dashboard.templating.list.filter((v) => v.type === 'query'))
      expect(variable.datasource, variable.name).toEqual(prometheus);
    for (const annotation of dashboard.annotations.list.filter((a) => !a.builtIn))
      expect(
        [prometheus, { type: 'grafana-postgresql-datasource', uid: variable('postgres') }],
        annotation.name,
      ).toContainEqual(annotation.datasource);
  });

  it('allows `definition` only because the schema still lacks it (drop the allowance once it has it)', () => {
    const errors = compileErrors(
      "import type { VariableModel } from '@grafana/schema';\n" +
        "export const v: VariableModel = { name: 'node', type: 'query', definition: 'label_values(up, job)' };\n",
    );
    expect(errors.join('\n')).toMatch(/'definition' does not exist in type 'VariableModel'/);
  }, 60_000);

  // Each mutation alone; the check must name what is wrong.
  const mutations: Array<[string, (d: Json & { panels: Json[] }) => void, RegExp]> = [
    [
      'a wrong field type (gridPos.w as a string)',
      (d) => {
        (firstOfType(d, 'timeseries').gridPos as Json).w = '8';
      },
      /'string' is not assignable to type 'number'/,
    ],
    [
      'an unknown panel property',
      (d) => {
        firstOfType(d, 'stat').legendFormat = '{{node}}';
      },
      /'"legendFormat"' does not exist/,
    ],
    [
      'a threshold mode that is not one',
      (d) => {
        const panel = d.panels.find((p) => (p.fieldConfig as { defaults?: Json })?.defaults?.thresholds);
        ((panel!.fieldConfig as { defaults: Json }).defaults.thresholds as Json).mode = 'absolut';
      },
      /"absolut"' is not assignable/,
    ],
    [
      '`definition` anywhere but a query variable',
      (d) => {
        const variables = (d.templating as { list: Json[] }).list;
        variables.find((v) => v.type === 'datasource')!.definition = 'prometheus';
      },
      /'"definition"' does not exist/,
    ],
    [
      'a misspelled annotation query field',
      (d) => {
        const annotations = (d.annotations as { list: Array<{ target?: Json }> }).list;
        const sql = annotations.find((a) => a.target?.rawSql)!.target!;
        sql.rawSQL = sql.rawSql;
        delete sql.rawSql;
      },
      /'"rawSQL"' does not exist/,
    ],
  ];

  it.each(mutations)(
    'fails on %s',
    (_what, mutate, expected) => {
      const dashboard = shipped();
      mutate(dashboard);
      const errors = typeErrors(dashboard);
      expect(errors.length, 'the mutated copy type-checks').toBeGreaterThan(0);
      expect(errors.join('\n')).toMatch(expected);
    },
    60_000,
  );
});
