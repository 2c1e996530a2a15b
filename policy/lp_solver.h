// A small linear program solved with GLPK's simplex: variables with bounds,
// rows "sum a_j x_j <= / >= / == b", one linear objective. The only part of
// Strata that includes glpk.h (in lp_solver.cpp); the glp_prob lives in a
// unique_ptr with glp_delete_prob as its deleter, and GLPK's terminal output
// is switched off. A solved program can take more rows and a new objective
// and be solved again from the previous basis (lexicographic objectives).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

struct glp_prob;

namespace strata {

class LinearProgram {
 public:
  enum class Status { kOptimal, kInfeasible, kUnbounded, kFailed };
  using Coeffs = std::vector<std::pair<int, double>>;  // (variable, coefficient)

  LinearProgram();
  ~LinearProgram();
  LinearProgram(const LinearProgram&) = delete;
  LinearProgram& operator=(const LinearProgram&) = delete;

  // Adds a variable lo <= x <= hi (hi = +inf allowed); returns its index.
  int add_var(double lo, double hi, const std::string& name = {});
  // Fixes a variable to a value.
  void fix_var(int var, double value);
  void add_le(const Coeffs& row, double rhs);
  void add_ge(const Coeffs& row, double rhs);
  void add_eq(const Coeffs& row, double rhs);
  // Minimises sum c_j x_j (+ constant) from now on.
  void minimize(const Coeffs& objective, double constant = 0);

  Status solve();
  double value(int var) const;
  double objective() const;
  int n_vars() const { return n_vars_; }

 private:
  void add_row(const Coeffs& row, int type, double lo, double hi);

  struct Deleter {
    void operator()(glp_prob* p) const;
  };
  std::unique_ptr<glp_prob, Deleter> prob_;
  int n_vars_ = 0;
  bool solved_once_ = false;
};

}  // namespace strata
