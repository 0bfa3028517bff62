//! Table tests for the condition language: every operator, function, type
//! rule and error class.

use leasehold_policy::cond::{EvalOptions, eval_str};
use leasehold_policy::{Value, Vars};
use proptest::prelude::*;

fn vars() -> Vars {
    Vars::from_json(&serde_json::json!({
        "env": {"HOSTNAME": "node-a", "EMPTY": ""},
        "host": {"name": "worker-1", "ip": ["10.0.0.5", "fd00::5"], "cpus": 8, "load": 0.5},
        "kubernetes_leaderelection": {"leader": true, "term": 7, "holder": "pod-1"},
        "follower": {"leader": false},
        "data": {
            "list": ["one", "two", "three"],
            "map": {"k1": "v1", "k2": "v2", "k3": "v3"},
            "nested": {"deep": {"x": 1}}
        }
    }))
    .unwrap()
}

enum Want {
    T,
    F,
    Err,
}
use Want::*;

fn run(table: &[(&str, Want)]) {
    let v = vars();
    for (src, want) in table {
        let got = eval_str(src, &v, EvalOptions::default());
        match (want, &got) {
            (T, Ok(true)) | (F, Ok(false)) | (Err, Result::Err(_)) => {}
            _ => panic!("{src:?}: got {got:?}"),
        }
    }
}

#[test]
fn literals_and_booleans() {
    run(&[
        ("true", T),
        ("TRUE", T),
        ("false", F),
        ("FALSE", F),
        ("True", Err),
        ("1", Err),
        ("'true'", Err),
        ("[true]", Err),
        ("{a: true}", Err),
        ("[] == []", T),
        ("{} == {}", T),
        ("\"double\" == 'double'", T),
        ("'' == \"\"", T),
        ("-0 == 0", T),
        ("-1.5 == -1.5", T),
    ]);
}

#[test]
fn variables_and_alternatives() {
    run(&[
        ("${env.HOSTNAME} == 'node-a'", T),
        ("${host.name} == 'worker-1'", T),
        ("${host.ip.0} == '10.0.0.5'", T),
        ("${host.ip.9} == ${nothing.here}", T),
        ("${env.MISSING|host.name} == 'worker-1'", T),
        ("${env.MISSING|host.MISSING|'fallback'} == 'fallback'", T),
        ("${env.MISSING|\"dq\"} == 'dq'", T),
        ("${env.MISSING|42} == 42", T),
        ("${env.MISSING|4.5} == 4.5", T),
        ("${env.MISSING|true} == true", T),
        ("${env.MISSING|false} == false", T),
        ("${'just constant'} == 'just constant'", T),
        ("${env.HOSTNAME|'unused'} == 'node-a'", T),
        ("${ env.HOSTNAME | 'x' } == 'node-a'", T),
        ("${env.EMPTY} == ''", T),
        ("${kubernetes_leaderelection.leader}", T),
        ("${follower.leader}", F),
        ("${kubernetes_leaderelection.leader} == true", T),
        ("${kubernetes_leaderelection.term} >= 7", T),
        ("${data.nested.deep.x} == 1", T),
        // conditions look names up as written: no default provider
        ("${HOSTNAME} == 'node-a'", F),
        ("${HOSTNAME} == ${also.missing}", T),
        // the whole provider is a map
        ("hasKey(${host}, 'name')", T),
    ]);
}

#[test]
fn null_rules() {
    run(&[
        ("${missing} == ${missing}", T),
        ("${missing} != ${missing}", F),
        ("${missing} == false", F),
        ("false == ${missing}", F),
        ("${missing} != false", T),
        ("'' == ${missing}", F),
        ("1 == ${missing}", F),
        ("1.5 != ${missing}", T),
        ("${missing} == 0", F),
        ("[1] == ${missing}", F),
        ("${missing} < 1", Err),
        ("${missing} + 1 == 1", Err),
        ("not ${missing}", Err),
        ("${missing} and true", Err),
        ("${missing}", Err),
    ]);
}

#[test]
fn equality_type_rules() {
    run(&[
        ("'a' == 'a'", T),
        ("'a' == 'b'", F),
        ("'a' != 'b'", T),
        ("1 == 1", T),
        ("1 == 2", F),
        ("1 == 1.0", T),
        ("1.0 == 1", T),
        ("1.1 == 1", F),
        ("1 != 1.0", F),
        ("true == true", T),
        ("true == false", F),
        ("true != false", T),
        // bool/string/list/map on the left: unequal to other types
        ("true == 'true'", F),
        ("true != 'true'", T),
        ("${kubernetes_leaderelection.leader} == 'true'", F),
        ("'true' == true", F),
        ("'1' == 1", F),
        ("'1' != 1", T),
        ("[1] == 1", F),
        ("{a: 1} == 'x'", F),
        ("true == 1", F),
        // a number on the left only compares with numbers (or null)
        ("1 == 'a'", Err),
        ("1 != 'a'", Err),
        ("1 == true", Err),
        ("1.5 == [1]", Err),
        ("${host.cpus} == '8'", Err),
        // lists and maps compare element-wise
        (
            "[true, false, 1, 1.0, 'x'] == [true, false, 1, 1.0, 'x']",
            T,
        ),
        ("[1, 2] == [1, 2.0]", T),
        ("[1, 2] == [2, 1]", F),
        ("[1, 2] == [1, 2, 3]", F),
        ("[1, 2] != [1, 3]", T),
        ("[1] == ['x']", Err),
        ("['x'] == [1]", F),
        ("{a: 1, b: 'x'} == {b: 'x', a: 1}", T),
        ("{a: 1, b: 'x'} == {a: 1}", F),
        ("{a: 1} == {c: 1}", F),
        ("{a: 1} != {a: 2}", T),
        (
            "{'quoted key': 1, \"dq\": 2} == {dq: 2, 'quoted key': 1}",
            T,
        ),
        ("{a: 1, a: 2} == {a: 2}", T),
        ("${data.list} == ['one', 'two', 'three']", T),
        ("${data.map} == {k1: 'v1', k2: 'v2', k3: 'v3'}", T),
    ]);
}

#[test]
fn ordering_comparisons() {
    run(&[
        ("1 < 2", T),
        ("2 < 1", F),
        ("2 < 2", F),
        ("2 <= 2", T),
        ("3 <= 2", F),
        ("3 > 2", T),
        ("2 > 2", F),
        ("2 >= 2", T),
        ("1 >= 2", F),
        ("1.5 < 2", T),
        ("2 < 2.5", T),
        ("2.5 >= 2.5", T),
        ("-1 < 0", T),
        ("${host.load} < 1", T),
        ("'a' < 'b'", Err),
        ("1 < 'b'", Err),
        ("true > false", Err),
        ("[1] <= [2]", Err),
    ]);
}

#[test]
fn arithmetic_and_precedence() {
    run(&[
        ("1 + 2 == 3", T),
        ("5 - 7 == -2", T),
        ("6 * 7 == 42", T),
        ("7 / 2 == 3", T),
        ("-7 / 2 == -3", T),
        ("7.0 / 2 == 3.5", T),
        ("7 / 2.0 == 3.5", T),
        ("7 % 3 == 1", T),
        ("-7 % 3 == -1", T),
        ("7 % -3 == 1", T),
        ("0.1 + 0.2 > 0.3", T),
        ("2 + 3 * 4 == 14", T),
        ("(2 + 3) * 4 == 20", T),
        ("20 / 5 * 2 == 8", T),
        ("20 / (5 * 2) == 2", T),
        ("10 - 2 - 3 == 5", T),
        ("2 * 3 % 4 == 2", T),
        ("-3 * (2 + 2) == -12", T),
        ("-12.0 / (7 % 4) == -4", T),
        ("1 + 1.5 == 2.5", T),
        ("9223372036854775807 + 1 < 0", T),
        ("-9223372036854775807 - 1 == -9223372036854775807 - 1", T),
        ("1 / 0 == 0", Err),
        ("1.0 / 0 == 0", Err),
        ("1 / 0.0 == 0", Err),
        ("5 % 0 == 0", Err),
        ("5.5 % 2 == 1", Err),
        ("5 % 2.0 == 1", Err),
        ("'a' + 'b' == 'ab'", Err),
        ("true + 1 == 2", Err),
        ("1 + ${missing} == 1", Err),
        // operators need spaces: these lex as names or negative numbers
        ("5-3 == 2", Err),
        ("8/2 == 4", Err),
        ("5 -3 == 2", Err),
    ]);
}

#[test]
fn logic_not_and_or() {
    run(&[
        ("not false", T),
        ("NOT true", F),
        ("not (1 == 1)", F),
        ("not (1 != 1)", T),
        ("not not true", T),
        ("true and true", T),
        ("true AND false", F),
        ("false and true", F),
        ("false or true", T),
        ("false OR false", F),
        ("1 == 1 and 2 == 2", T),
        ("1 == 2 or 2 == 2", T),
        ("true or false and false", T),
        ("(true or false) and false", F),
        ("((1 == 1) AND (2 == 2)) OR (2 != 3)", T),
        ("1 == 1 OR 2 == 2 AND 2 != 3", T),
        // not binds tighter than comparisons
        ("not true == false", T),
        ("not 1 == 1", Err),
        // no short circuit: an error on either side is an error
        ("true or 1", Err),
        ("false and 'x'", Err),
        ("true or (1 / 0 == 1)", Err),
        ("not 'x'", Err),
        ("And == 1", Err),
        ("true && false", Err),
        ("true || false", Err),
        ("!true", Err),
    ]);
}

#[test]
fn each_comparison_has_its_own_precedence_level() {
    run(&[
        // `==` binds tighter than `<`: 1 < (2 == true) -> number vs bool
        ("1 < 2 == true", Err),
        ("(1 < 2) == true", T),
        // `==` tighter than `!=`: 1 != (1 == false) -> number vs bool error
        ("1 != 1 == false", Err),
        ("(1 != 1) == false", T),
        ("1 == 1 != false", T),
    ]);
}

#[test]
fn array_and_map_functions() {
    run(&[
        ("arrayContains(['a', 1, 2.5, true], 1)", T),
        ("arrayContains(['a', 1, 2.5, true], 1.0)", F),
        ("arrayContains(['a', 1, 2.5, true], 'a')", T),
        ("arrayContains(['a', 1, 2.5, true], 'b')", F),
        ("arrayContains(['a', 1, 2.5, true], 'b', true)", T),
        ("arrayContains(${data.list}, 'nope', 'two')", T),
        ("arrayContains(${host.ip}, '10.0.0.5')", T),
        ("arrayContains(${missing}, 'x')", F),
        ("arrayContains([], 'x')", F),
        ("arrayContains('not a list', 'x')", Err),
        ("arrayContains(['x'])", Err),
        ("hasKey({a: 1, b: 2}, 'b')", T),
        ("hasKey({a: 1, b: 2}, 'z', 'a')", T),
        ("hasKey({a: 1, b: 2}, 'y', 'z')", F),
        ("hasKey(${data.map}, 'k3')", T),
        ("hasKey(${missing}, 'k3')", F),
        ("hasKey({a: 1}, 'a', 2)", T),
        ("hasKey({a: 1}, 2, 'a')", Err),
        ("hasKey(${data.list}, 'x')", Err),
        ("hasKey(${data.map})", Err),
        ("length('hello') == 5", T),
        ("length('héllo') == 6", T),
        ("length('') == 0", T),
        ("length([1, 2, 3]) == 3", T),
        ("length({a: 1, b: 2}) == 2", T),
        ("length(${data.map}) == 3", T),
        ("length(${missing}) == 0", T),
        ("length(5) == 1", Err),
        ("length(true) == 1", Err),
        ("length() == 0", Err),
        ("length('a', 'b') == 1", Err),
        ("length('hello')", Err),
    ]);
}

#[test]
fn math_functions() {
    run(&[
        ("add(2, 3) == 5", T),
        ("add(1.5, 1.5) == 3.0", T),
        ("add(1, 0.5) == 1.5", T),
        ("add(1) == 1", Err),
        ("add(1, 2, 3) == 6", Err),
        ("add('1', 2) == 3", Err),
        ("subtract(5, 7) == -2", T),
        ("subtract(2.5, 0.5) == 2", T),
        ("subtract(5) == 5", Err),
        ("subtract(true, 1) == 0", Err),
        ("multiply(6, 7) == 42", T),
        ("multiply(2.5, 2) == 5", T),
        ("multiply(2) == 2", Err),
        ("multiply('a', 2) == 2", Err),
        ("divide(9, 2) == 4", T),
        ("divide(9.0, 2) == 4.5", T),
        ("divide(9, 0) == 0", Err),
        ("divide(9.0, 0.0) == 0", Err),
        ("divide(9) == 9", Err),
        ("divide('9', 3) == 3", Err),
        ("modulo(9, 4) == 1", T),
        ("modulo(9, 0) == 0", Err),
        ("modulo(9.5, 4) == 1.5", Err),
        ("modulo(9) == 9", Err),
        ("modulo(9, 4, 1) == 1", Err),
        ("add(multiply(2, 3), divide(8, 4)) == 8", T),
    ]);
}

#[test]
fn string_functions() {
    run(&[
        ("concat() == ''", T),
        ("concat('a', 'b', 'c') == 'abc'", T),
        ("concat('n=', 2) == 'n=2'", T),
        ("concat(2.0) == '2E+00'", T),
        ("concat(1.25) == '1.25E+00'", T),
        ("concat(['a', 'b'], true, {k: 'v'}) == '[a,b]true{k:v}'", T),
        ("concat({b: 2, a: 1}) == '{a:1,b:2}'", T),
        ("concat(${missing}) == 'null'", T),
        ("endsWith('leasehold', 'hold')", T),
        ("endsWith('leasehold', 'lease')", F),
        ("endsWith(12345, 45)", T),
        ("endsWith('x')", Err),
        ("endsWith('x', 'y', 'z')", Err),
        ("startsWith('leasehold', 'lease')", T),
        ("startsWith('leasehold', 'hold')", F),
        ("startsWith(${env.HOSTNAME}, 'node-')", T),
        ("startsWith('x')", Err),
        ("startsWith('x', 'y', 'z')", Err),
        ("stringContains('leasehold', 'seh')", T),
        ("stringContains('leasehold', 'xyz')", F),
        ("stringContains('a0b', 0)", T),
        ("stringContains('leasehold', 0)", F),
        ("stringContains('x')", Err),
        ("stringContains('x', 'y', 'z')", Err),
        ("indexOf('kube-system.svc', '.') == 11", T),
        ("indexOf('a.b.c', '.', 2) == 3", T),
        ("indexOf('abc', 'z') == -1", T),
        ("indexOf('abc', 'z', 2) == 1", T),
        ("indexOf('abc', '', 3) == 3", T),
        ("indexOf('abc', 'a', 4) == 0", Err),
        ("indexOf('abc', 'a', -1) == 0", Err),
        ("indexOf('abc', 'a', 1.0) == 0", Err),
        ("indexOf('abc', 'a', '1') == 0", Err),
        ("indexOf('abc') == 0", Err),
        ("indexOf('abc', 'a', 1, 2) == 0", Err),
        ("match('worker-17', '^worker-[0-9]+$')", T),
        ("match('worker-17', '^master', '[0-9]{2}')", T),
        ("match('worker-17', '^master')", F),
        ("match('x', '[unclosed')", Err),
        ("match('x', 1)", Err),
        ("match('x')", Err),
        ("match('x', 'x', 1)", T),
        ("number('002020') == 2020", T),
        ("number('-15') == -15", T),
        ("number('0xbeef', 16) == 48879", T),
        ("number('ff', 16) == 255", T),
        ("number('0x1f', 0) == 0", Err),
        ("number('017', 0) == 15", T),
        ("number(42) == 42", T),
        ("number('1.5') == 1", Err),
        ("number('twelve') == 12", Err),
        ("number('12', 1) == 12", Err),
        ("number('12', 37) == 12", Err),
        ("number('12', '10') == 12", Err),
        ("number() == 0", Err),
        ("number('1', 10, 3) == 1", Err),
        ("number(${host.cpus}) == 8", T),
        ("string('s') == 's'", T),
        ("string(12) == '12'", T),
        ("string(2.0) == '2E+00'", T),
        ("string(0.001) == '1E-03'", T),
        ("string(true) == 'true'", T),
        ("string(false) == 'false'", T),
        ("string(['a', 1]) == '[a,1]'", T),
        ("string({k: 'v'}) == '{k:v}'", T),
        ("string(${missing}) == 'null'", T),
        ("string() == ''", Err),
        ("string(1, 2) == '1'", Err),
        ("unknownFn(1)", Err),
        ("Length('x') == 1", Err),
    ]);
}

#[test]
fn syntax_errors() {
    run(&[
        ("", Err),
        ("   ", Err),
        ("(", Err),
        ("(true", Err),
        ("true)", Err),
        ("1 ==", Err),
        ("== 1", Err),
        ("true true", Err),
        ("${}", Err),
        ("${a", Err),
        ("${a|}", Err),
        ("${a b}", Err),
        ("[1, 2", Err),
        ("[1, ${a}] == []", Err),
        ("[[1]] == []", Err),
        ("{a: {b: 1}} == {}", Err),
        ("{a} == {}", Err),
        ("{1: 2} == {}", Err),
        ("'unterminated", Err),
        ("'multi\nline' == 'x'", Err),
        ("bareword", Err),
        ("a.b == 1", Err),
        ("1 = 1", Err),
        ("1 === 1", Err),
        ("@", Err),
        ("length(", Err),
        ("length('a',)", Err),
        ("99999999999999999999 > 1", Err),
    ]);
}

#[test]
fn strict_mode_rejects_missing_variables() {
    let v = vars();
    let strict = EvalOptions { strict: true };
    assert!(eval_str("${missing.x} == ${missing.x}", &v, strict).is_err());
    assert!(eval_str("${missing.x|host.name} == 'worker-1'", &v, strict).unwrap());
    assert!(eval_str("${missing.x|'d'} == 'd'", &v, strict).unwrap());
    let e = eval_str("1 == 1 and ${nope.x} == 1", &v, strict).unwrap_err();
    assert_eq!(e.column, 12);
    assert!(e.message.contains("nope.x"), "{e}");
}

#[test]
fn errors_point_at_the_offending_column() {
    let v = vars();
    let cases = [
        ("1 == 'a'", 3, "number"),
        ("true and 1 == 1 or 5", 17, "booleans"),
        ("length(1) == 1", 1, "length"),
        ("1 / 0 == 1", 3, "division by zero"),
        ("'x' == ", 8, "expected a value"),
        ("not 3", 1, "boolean"),
        ("1 + 1", 1, "boolean"),
    ];
    for (src, col, text) in cases {
        let e = eval_str(src, &v, EvalOptions::default()).unwrap_err();
        assert_eq!(e.column, col, "{src}: {e}");
        assert!(e.message.contains(text), "{src}: {e}");
    }
}

#[test]
fn values_from_vars_keep_their_types() {
    let mut v = Vars::new();
    v.set_provider("p", Value::Int(3));
    assert!(eval_str("${p} == 3", &v, EvalOptions::default()).unwrap());
    assert!(eval_str("${p} / 2 == 1", &v, EvalOptions::default()).unwrap());
}

proptest! {
    #[test]
    fn integer_arithmetic_matches_wrapping_i64(a in any::<i64>(), b in any::<i64>()) {
        let v = Vars::new();
        let sum = a.wrapping_add(b);
        let src = format!("{a} + {b} == {sum}");
        prop_assert!(eval_str(&src, &v, EvalOptions::default()).unwrap());
        let cmp = format!("{a} < {b}");
        prop_assert_eq!(eval_str(&cmp, &v, EvalOptions::default()).unwrap(), a < b);
        if b != 0 {
            let q = format!("{a} / {b} == {}", a.wrapping_div(b));
            prop_assert!(eval_str(&q, &v, EvalOptions::default()).unwrap());
            let r = format!("{a} % {b} == {}", a.wrapping_rem(b));
            prop_assert!(eval_str(&r, &v, EvalOptions::default()).unwrap());
        }
    }

    #[test]
    fn string_equality_is_reflexive(s in "[a-zA-Z0-9 _.-]{0,20}") {
        let v = Vars::new();
        let src = format!("'{s}' == \"{s}\" and not ('{s}' != '{s}')");
        prop_assert!(eval_str(&src, &v, EvalOptions::default()).unwrap());
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
        let _ = eval_str(&s, &vars(), EvalOptions::default());
    }
}
