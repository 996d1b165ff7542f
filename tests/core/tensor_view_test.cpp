#include <catch2/catch.hpp>

#include <vector>

#include "weft/core/dtype.hpp"
#include "weft/core/tensor_view.hpp"

TEST_CASE("tensor views index row-major and slice rows") {
    std::vector<float> data{0, 1, 2, 3, 4, 5};
    weft::tensor_view<float> view(data, {2, 3});
    CHECK(view.rank() == 2);
    CHECK(view.rows() == 2);
    CHECK(view.cols() == 3);
    CHECK(view(1, 2) == 5);
    view(0, 1) = 10;
    CHECK(data[1] == 10);
    const auto second = view.row_slice(1, 1);
    CHECK(second.rows() == 1);
    CHECK(second(0, 0) == 3);
    CHECK_THROWS_WITH(view.row_slice(1, 2), Catch::Contains("row range end = 3"));
}

TEST_CASE("tensor views reject shapes that do not cover the buffer") {
    std::vector<float> data(6);
    CHECK_THROWS_WITH((weft::tensor_view<float>(data, {4, 2})),
                      Catch::Contains("shape element count = 8") && Catch::Contains("buffer size 6"));
    CHECK_THROWS_AS((weft::tensor_view<float>(data, {1, 1, 1, 2, 3})), weft::error);
}

TEST_CASE("dtypes know their size and safetensors name") {
    CHECK(weft::size_of(weft::dtype::bf16) == 2);
    CHECK(weft::size_of(weft::dtype_of_v<double>) == 8);
    CHECK(weft::to_string(weft::dtype::f32) == "F32");
}
