/**
 * The conditions of an analysis metric (`successCondition`, `failureCondition`, docs/promotion.md §
 * Analysis): a small expression language over `result`, the values a PromQL query returned, parsed into a
 * tree and evaluated by walking it. Nothing is ever handed to eval or Function.
 *
 *   condition  := or
 *   or         := and (("||" | "or") and)*
 *   and        := unary (("&&" | "and") unary)*
 *   unary      := ("!" | "not") unary | comparison
 *   comparison := operand (("<" | "<=" | ">" | ">=" | "==" | "!=") operand)?
 *   operand    := NUMBER | "true" | "false" | "result" ("[" INTEGER "]")? | "(" condition ")"
 *
 * `result` is a vector's values (a scalar is a vector of one). Unindexed, it must hold exactly one value
 * (an aggregation in the query: `max(...)`, `sum(...)`); `result[i]` is the i-th value. A condition must
 * be true or false: `result < 0.05 && result[0] >= 0` is one, `result` alone is not.
 */

export type ConditionNode =
  | { kind: 'number'; value: number }
  | { kind: 'boolean'; value: boolean }
  | { kind: 'result'; index?: number }
  | { kind: 'not'; operand: ConditionNode }
  | { kind: 'logical'; op: '&&' | '||'; left: ConditionNode; right: ConditionNode }
  | { kind: 'compare'; op: CompareOp; left: ConditionNode; right: ConditionNode };

type CompareOp = '<' | '<=' | '>' | '>=' | '==' | '!=';

/** A condition's syntax error, with where in the text. */
export class ConditionError extends Error {}

interface Token {
  text: string;
  at: number;
}

const TOKEN = /\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|&&|\|\||<=|>=|==|!=|[<>!()[\]]|[A-Za-z_][A-Za-z0-9_]*)/y;

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  TOKEN.lastIndex = 0;
  let at = 0;
  while (at < text.length) {
    if (/^\s*$/.test(text.slice(at))) break;
    TOKEN.lastIndex = at;
    const match = TOKEN.exec(text);
    if (!match) throw new ConditionError(`unexpected "${text.slice(at).trim()[0]}" at ${at + 1}`);
    tokens.push({ text: match[1]!, at: at + match[0].length - match[1]!.length });
    at = TOKEN.lastIndex;
  }
  return tokens;
}

class Parser {
  private position = 0;
  constructor(private readonly tokens: Token[]) {}

  parse(): ConditionNode {
    if (this.tokens.length === 0) throw new ConditionError('empty condition');
    const node = this.or();
    const extra = this.tokens[this.position];
    if (extra) throw new ConditionError(`unexpected "${extra.text}" at ${extra.at + 1}`);
    return node;
  }

  private peek(): string | undefined {
    return this.tokens[this.position]?.text;
  }

  private take(): Token {
    const token = this.tokens[this.position++];
    if (!token) throw new ConditionError('the condition ends too early');
    return token;
  }

  private expect(text: string): void {
    const token = this.take();
    if (token.text !== text)
      throw new ConditionError(`expected "${text}" at ${token.at + 1}, not "${token.text}"`);
  }

  private or(): ConditionNode {
    let left = this.and();
    while (this.peek() === '||' || this.peek() === 'or') {
      this.take();
      left = { kind: 'logical', op: '||', left, right: this.and() };
    }
    return left;
  }

  private and(): ConditionNode {
    let left = this.unary();
    while (this.peek() === '&&' || this.peek() === 'and') {
      this.take();
      left = { kind: 'logical', op: '&&', left, right: this.unary() };
    }
    return left;
  }

  private unary(): ConditionNode {
    if (this.peek() === '!' || this.peek() === 'not') {
      this.take();
      return { kind: 'not', operand: this.unary() };
    }
    const left = this.operand();
    const op = this.peek();
    if (op === '<' || op === '<=' || op === '>' || op === '>=' || op === '==' || op === '!=') {
      this.take();
      return { kind: 'compare', op, left, right: this.operand() };
    }
    return left;
  }

  private operand(): ConditionNode {
    const token = this.take();
    if (/^\d/.test(token.text)) return { kind: 'number', value: Number(token.text) };
    if (token.text === 'true' || token.text === 'false')
      return { kind: 'boolean', value: token.text === 'true' };
    if (token.text === '(') {
      const inner = this.or();
      this.expect(')');
      return inner;
    }
    if (token.text === 'result') {
      if (this.peek() !== '[') return { kind: 'result' };
      this.take();
      const index = this.take();
      if (!/^\d+$/.test(index.text))
        throw new ConditionError(`result[…] takes a whole number, not "${index.text}" at ${index.at + 1}`);
      this.expect(']');
      return { kind: 'result', index: Number(index.text) };
    }
    throw new ConditionError(
      `unexpected "${token.text}" at ${token.at + 1} (known: result, result[i], numbers, true, false)`,
    );
  }
}

/** What a condition yields at the top: it must be a boolean, checked when the file is read. */
function typeOf(node: ConditionNode): 'number' | 'boolean' {
  switch (node.kind) {
    case 'number':
    case 'result':
      return 'number';
    case 'boolean':
    case 'compare':
      return 'boolean';
    case 'not':
    case 'logical':
      return 'boolean';
  }
}

/** Every operand of a comparison is a number, every operand of !, && and || a condition. */
function checkTypes(node: ConditionNode): void {
  if (node.kind === 'compare') {
    for (const side of [node.left, node.right])
      if (typeOf(side) !== 'number')
        throw new ConditionError(`"${node.op}" compares numbers, not a condition`);
  } else if (node.kind === 'not') {
    if (typeOf(node.operand) !== 'boolean') throw new ConditionError('"!" takes a condition, not a number');
    checkTypes(node.operand);
  } else if (node.kind === 'logical') {
    for (const side of [node.left, node.right]) {
      if (typeOf(side) !== 'boolean') throw new ConditionError(`"${node.op}" joins conditions, not numbers`);
      checkTypes(side);
    }
  }
}

export interface Condition {
  text: string;
  evaluate(result: readonly number[]): boolean;
}

/** Parses and checks a condition; a ConditionError says what is wrong and where. */
export function parseCondition(text: string): Condition {
  const tree = new Parser(tokenize(text)).parse();
  if (typeOf(tree) !== 'boolean')
    throw new ConditionError('a condition must be true or false (compare result with a number)');
  checkTypes(tree);
  return { text, evaluate: (result) => evaluate(tree, result) as boolean };
}

function valueOfResult(index: number | undefined, result: readonly number[]): number {
  if (index === undefined) {
    if (result.length !== 1)
      throw new Error(
        `result has ${result.length} values: index one (result[0]) or aggregate in the query (max, sum)`,
      );
    return result[0]!;
  }
  if (index >= result.length) throw new Error(`result[${index}]: the result has ${result.length} values`);
  return result[index]!;
}

const COMPARE: Record<CompareOp, (a: number, b: number) => boolean> = {
  '<': (a, b) => a < b,
  '<=': (a, b) => a <= b,
  '>': (a, b) => a > b,
  '>=': (a, b) => a >= b,
  '==': (a, b) => a === b,
  '!=': (a, b) => a !== b,
};

/** Walks the tree; an unindexed `result` of several values, or an index past its end, throws (an error). */
function evaluate(node: ConditionNode, result: readonly number[]): number | boolean {
  switch (node.kind) {
    case 'number':
    case 'boolean':
      return node.value;
    case 'result':
      return valueOfResult(node.index, result);
    case 'not':
      return !evaluate(node.operand, result);
    case 'logical':
      return node.op === '&&'
        ? (evaluate(node.left, result) as boolean) && (evaluate(node.right, result) as boolean)
        : (evaluate(node.left, result) as boolean) || (evaluate(node.right, result) as boolean);
    case 'compare':
      return COMPARE[node.op](evaluate(node.left, result) as number, evaluate(node.right, result) as number);
  }
}
