/**
 * Reads a JUnit XML report the way a CI system would: parsed by a real XML parser (Chromium's DOMParser,
 * Debian's /usr/bin/chromium as in the console tests), a malformed document an error.
 */
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

export interface JunitCase {
  name: string;
  classname: string;
  time: number;
  failure?: { message: string; type: string; text: string };
  skipped?: string;
  systemOut?: string;
}

export interface JunitSuite {
  name: string;
  /** Its `time` attribute, in seconds. */
  time: number;
  tests: number;
  failures: number;
  skipped: number;
  cases: JunitCase[];
}

/** The few DOM types the parse below uses (the project's TypeScript has no DOM library). */
interface XmlElement {
  tagName: string;
  children: ArrayLike<XmlElement>;
  textContent: string | null;
  getAttribute(name: string): string | null;
  querySelector(selector: string): XmlElement | null;
  querySelectorAll(selector: string): ArrayLike<XmlElement>;
}

export async function readJunit(file: string): Promise<JunitSuite[]> {
  return (await readJunitReport(file)).suites;
}

/** The whole report: `<testsuites>`'s `time` (seconds) and its suites. */
export async function readJunitReport(file: string): Promise<{ time: number; suites: JunitSuite[] }> {
  const xml = readFileSync(file, 'utf8');
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  try {
    const page = await browser.newPage();
    return await page.evaluate((text) => {
      const { DOMParser } = globalThis as unknown as {
        DOMParser: new () => {
          parseFromString(text: string, type: string): XmlElement & { documentElement: XmlElement };
        };
      };
      const doc = new DOMParser().parseFromString(text, 'application/xml');
      const error = doc.querySelector('parsererror');
      if (error) throw new Error(`not well-formed XML: ${error.textContent}`);
      if (doc.documentElement.tagName !== 'testsuites') throw new Error('the root is not <testsuites>');
      const suites = Array.from(doc.documentElement.children).map((suite) => ({
        name: suite.getAttribute('name') ?? '',
        time: Number(suite.getAttribute('time')),
        tests: Number(suite.getAttribute('tests')),
        failures: Number(suite.getAttribute('failures')),
        skipped: Number(suite.getAttribute('skipped')),
        cases: Array.from(suite.querySelectorAll('testcase')).map((test) => {
          const failure = test.querySelector('failure');
          const skipped = test.querySelector('skipped');
          return {
            name: test.getAttribute('name') ?? '',
            classname: test.getAttribute('classname') ?? '',
            time: Number(test.getAttribute('time')),
            ...(failure
              ? {
                  failure: {
                    message: failure.getAttribute('message') ?? '',
                    type: failure.getAttribute('type') ?? '',
                    text: failure.textContent ?? '',
                  },
                }
              : {}),
            ...(skipped ? { skipped: skipped.getAttribute('message') ?? '' } : {}),
            ...(test.querySelector('system-out')
              ? { systemOut: test.querySelector('system-out')?.textContent ?? '' }
              : {}),
          };
        }),
      }));
      return { time: Number(doc.documentElement.getAttribute('time')), suites };
    }, xml);
  } finally {
    await browser.close();
  }
}
