/**
 * JUnit XML, the report CI systems read (GitLab, Jenkins, GitHub test reporters): `<testsuites>` of
 * `<testsuite>`s of `<testcase>`s, each passed, `<failure>` or `<skipped>`, times in seconds. `smoke
 * --junit` and `promote --junit` write it; what a smoke outcome means as a test case is decided where the
 * outcomes are (cli/smoke/run.ts `junitCase`).
 */
import { existsSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { UsageError } from '../args.js';

export interface TestCase {
  name: string;
  classname: string;
  ms: number;
  status: 'passed' | 'failed' | 'skipped';
  /** The failure's or skip's one-line reason (the `message` attribute). */
  message?: string;
  /** The failure's kind (its `type` attribute). */
  type?: string;
  /** More text for a reader: the failure's body, or a passed case's `<system-out>`. */
  detail?: string;
}

export interface TestSuite {
  name: string;
  /** When the suite started (ISO 8601). */
  timestamp: string;
  cases: TestCase[];
}

/** Characters XML 1.0 cannot carry at all (control characters but tab, newline, return; lone surrogates). */
const NOT_XML = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

/** Text for an attribute value or element content: escaped, and what XML cannot hold replaced by U+FFFD. */
export function xmlEscape(text: string): string {
  return text
    .replace(NOT_XML, '\uFFFD')
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&apos;');
}

const seconds = (ms: number) => (ms / 1000).toFixed(3);

function caseXml(test: TestCase): string {
  const attributes = `name="${xmlEscape(test.name)}" classname="${xmlEscape(test.classname)}" time="${seconds(test.ms)}"`;
  const message = `message="${xmlEscape(test.message ?? '')}"`;
  const body =
    test.status === 'failed'
      ? `<failure ${message} type="${xmlEscape(test.type ?? 'failure')}">${xmlEscape(test.detail ?? test.message ?? '')}</failure>`
      : test.status === 'skipped'
        ? `<skipped ${message}/>`
        : test.detail
          ? `<system-out>${xmlEscape(test.detail)}</system-out>`
          : '';
  return body ? `    <testcase ${attributes}>${body}</testcase>` : `    <testcase ${attributes}/>`;
}

export function junitXml(suites: TestSuite[]): string {
  const count = (suite: TestSuite, status: TestCase['status']) =>
    suite.cases.filter((test) => test.status === status).length;
  const total = (f: (suite: TestSuite) => number) => suites.reduce((sum, suite) => sum + f(suite), 0);
  const ms = (suite: TestSuite) => suite.cases.reduce((sum, test) => sum + test.ms, 0);
  const suiteXml = (suite: TestSuite) =>
    [
      `  <testsuite name="${xmlEscape(suite.name)}" tests="${suite.cases.length}" failures="${count(suite, 'failed')}" errors="0" skipped="${count(suite, 'skipped')}" time="${seconds(ms(suite))}" timestamp="${xmlEscape(suite.timestamp)}">`,
      ...suite.cases.map(caseXml),
      '  </testsuite>',
    ].join('\n');
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="workbench" tests="${total((s) => s.cases.length)}" failures="${total((s) => count(s, 'failed'))}" errors="0" skipped="${total((s) => count(s, 'skipped'))}" time="${seconds(total(ms))}">`,
    ...suites.map(suiteXml),
    '</testsuites>',
    '',
  ].join('\n');
}

/** `--junit FILE` checked before anything runs: its folder must exist (the file is written at the end). */
export function junitPathOption(file: string | undefined): string | undefined {
  if (file === undefined) return undefined;
  if (file === '') throw new UsageError('--junit needs a file name');
  const folder = dirname(file);
  if (!existsSync(folder) || !statSync(folder).isDirectory())
    throw new UsageError(`--junit ${file}: the folder ${folder} does not exist`);
  if (existsSync(file) && statSync(file).isDirectory()) throw new UsageError(`--junit ${file} is a folder`);
  return file;
}

/** Written whole or not at all (a temporary file renamed over it): a CI system never reads half a report. */
export function writeJunitFile(file: string, suites: TestSuite[]): void {
  const temporary = join(dirname(file), `.${basename(file)}.${process.pid}.tmp`);
  writeFileSync(temporary, junitXml(suites));
  renameSync(temporary, file);
}
